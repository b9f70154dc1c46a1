"""The /metrics exposition: streamed a family at a time, the same text as prometheus-client's
own `generate_latest` of the whole registry, and never holding two per-group families.

Here over real HTTP on loopback; the rest is in tests/unit/test_metrics.py.
"""

from __future__ import annotations

import asyncio
import http.client
import urllib.parse
from pathlib import Path

from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from rgd.api.app import build_app
from tests.unit.test_metrics import _daemon


def assert_head_then_get_metrics(url: str) -> None:
    """HEAD /metrics answers headers only, and a GET on the same connection after it reads a
    whole exposition: a streamed body written to a HEAD answer was read as the next
    answer's status line."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("HEAD", "/metrics")
        head = conn.getresponse()
        assert head.status == 200 and head.read() == b""
        conn.request("GET", "/metrics")
        got = conn.getresponse()
        assert got.status == 200
        text = got.read().decode()
        assert "# TYPE rgd_reports_published_total counter" in text
        names = {f.name for f in text_string_to_metric_families(text)}
        assert names >= {"rgd_reports_published", "rgd_cluster_members"}
    finally:
        conn.close()


async def test_head_then_get_on_one_connection(tmp_path: Path) -> None:
    server = TestServer(build_app(_daemon(tmp_path)), host="127.0.0.1")
    await server.start_server()
    try:
        await asyncio.to_thread(assert_head_then_get_metrics, str(server.make_url("/")))
    finally:
        await server.close()

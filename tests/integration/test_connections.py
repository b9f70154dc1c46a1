"""Idle and slow connections time out, and a connection limit below the fd limit keeps
room for acquires, /metrics and /healthz.

`scripts/probe_idle_connections.py` does this at scale (2,000 connections, a
1024 fd limit) with latency and admission figures.
"""

from __future__ import annotations

import asyncio
import socket

from rgd.api.connection_guard import FD_RESERVE, connection_limit
from tests.support.live import base_url, wait_for, write_config


def hold(port: int, n: int, partial: bool = False) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        if partial:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # a header never finished
        out.append(s)
    return out


def closed_by_peer(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(4096) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def shed(d, action: str) -> int:
    return getattr(d.connection_guard.counts, action)


async def test_idle_connections_make_room_and_time_out(make_daemon, http, tmp_path) -> None:
    cfg = write_config(tmp_path / "c.yaml", {"g": {"publishRateInMsgs": 100}}, {"t/ns": "g"})
    d = await make_daemon("a", cfg, http_max_connections=40, http_idle_timeout=1.5)
    assert d.connection_guard.limit == 40
    held = await asyncio.to_thread(hold, d.bound_port, 60) + await asyncio.to_thread(hold, d.bound_port, 20, True)
    try:
        # Closed connections leave the server's list a loop turn later: poll, don't sample.
        await wait_for(lambda: shed(d, "idle_closed") >= 40 and d.connection_guard.open_connections <= 40, 5)
        for path in ("/healthz", "/metrics"):
            async with http.get(base_url(d) + path) as r:
                assert r.status == 200
        async with http.post(base_url(d) + "/v1/acquire", json={"namespace": "t/ns", "messages": 1}) as r:
            assert r.status == 200
        async with http.get(base_url(d) + "/metrics") as r:
            text = await r.text()
        assert 'rgd_http_connections_shed_total{action="idle_closed"}' in text
        assert "rgd_http_connection_limit 40.0" in text
        # Whatever the limit left open, idle or trickling a header, the idle timeout closes.
        await wait_for(lambda: all(closed_by_peer(s) for s in held), 10)
    finally:
        for s in held:
            s.close()


async def test_when_every_connection_is_busy_a_new_one_gets_503(make_daemon, tmp_path) -> None:
    d = await make_daemon("a", http_max_connections=3, http_idle_timeout=30)
    busy = []
    for _ in range(3):  # each has a request in progress: headers done, body still to come
        s = socket.create_connection(("127.0.0.1", d.bound_port), timeout=2)
        s.sendall(b"POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{")
        busy.append(s)
    try:
        await wait_for(lambda: d.connection_guard.open_connections == 3 and all(
            getattr(h, "_request_in_progress", False) for h in d.connection_guard.server.connections), 5)

        def ask() -> bytes:
            with socket.create_connection(("127.0.0.1", d.bound_port), timeout=2) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                return s.recv(4096)

        answer = await asyncio.to_thread(ask)
        assert answer.startswith(b"HTTP/1.1 503") and b"too many connections" in answer
        assert shed(d, "refused") == 1 and shed(d, "idle_closed") == 0
    finally:
        for s in busy:
            s.close()


def test_the_limit_stays_under_the_fd_limit() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert connection_limit(10**9) == (10**9 if soft == resource.RLIM_INFINITY else soft - FD_RESERVE)
    assert connection_limit(5) == 5


def _post_in_pieces(port: int, body: bytes, pieces: list[bytes], gap: float,
                    read_timeout: float) -> tuple[bytes, float]:
    """POST /v1/acquire announcing `body`'s length, then send `pieces` `gap` seconds apart;
    returns what the server answered (b"" if nothing) and when, from the headers."""
    import time

    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as s:
        s.sendall(b"POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))
        started = time.monotonic()
        s.setblocking(False)
        answer = b""
        for piece in pieces:
            time.sleep(gap)
            try:
                answer += s.recv(4096)
            except BlockingIOError:
                pass
            if answer:
                break
            try:
                s.sendall(piece)
            except OSError:
                break
        s.settimeout(read_timeout)
        while b"\r\n\r\n" not in answer:
            try:
                chunk = s.recv(4096)
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
        return answer, time.monotonic() - started


async def test_a_body_that_trickles_in_is_cut_off_with_408(make_daemon, tmp_path) -> None:
    cfg = write_config(tmp_path / "c.yaml", {"g": {"publishRateInMsgs": 100}}, {"t/ns": "g"})
    d = await make_daemon("a", cfg, http_idle_timeout=1.0)
    body = b'{"namespace": "t/ns", "messages": 1}'
    # One byte every 0.25 s: 9 s for the whole body, far past the 1 s allowed after the headers.
    answer, after = await asyncio.to_thread(_post_in_pieces, d.bound_port, body,
                                            [body[i:i + 1] for i in range(len(body))], 0.25, 10)
    head = answer.split(b"\r\n\r\n")[0].lower()
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"connection: close" in head
    assert b"not received within 1 s" in answer
    assert 1.0 <= after < 4.0
    # Whatever arrives later is not an acquire: nothing admitted, no handler left waiting.
    await wait_for(lambda: not any(getattr(h, "_request_in_progress", False)
                                   for h in d.connection_guard.server.connections), 15)
    assert sum(st.total_admitted_messages for st in d.limiter.states.values()) == 0


async def test_a_body_split_from_its_headers_but_in_time_is_answered(make_daemon, tmp_path) -> None:
    cfg = write_config(tmp_path / "c.yaml", {"g": {"publishRateInMsgs": 100}}, {"t/ns": "g"})
    d = await make_daemon("a", cfg, http_idle_timeout=2.0)
    body = b'{"namespace": "t/ns", "messages": 1}'
    answer, _ = await asyncio.to_thread(_post_in_pieces, d.bound_port, body, [body[:10], body[10:]], 0.2, 10)
    assert answer.startswith(b"HTTP/1.1 200"), answer

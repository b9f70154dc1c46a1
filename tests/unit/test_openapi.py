"""The OpenAPI document (kept in the repo, served at /openapi.json) matches the routes."""

import json
from pathlib import Path

from openapi_spec_validator import validate

from rgd.api.app import build_app
from rgd.api.errors import NO_ROUTE

ROOT = Path(__file__).resolve().parents[2]


class _Stub:  # build_app only stores the daemon; routes are what we compare
    pass


def spec_routes(spec: dict) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method in item
        if method in ("get", "put", "post", "delete", "patch")
    }


def app_routes() -> set[tuple[str, str]]:
    app = build_app(_Stub())  # type: ignore[arg-type]
    out = set()
    for route in app.router.routes():
        if route.method == "HEAD" or route.resource.name == NO_ROUTE:  # the JSON 404/405 catch-all
            continue
        out.add((route.method, route.resource.canonical))
    return out


def test_spec_is_valid_openapi():
    validate(json.loads((ROOT / "rgd" / "api" / "openapi.json").read_text()))


def test_spec_and_routes_agree():
    spec = json.loads((ROOT / "rgd" / "api" / "openapi.json").read_text())
    assert spec_routes(spec) == app_routes()

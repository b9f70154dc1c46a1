"""Every error the API returns is JSON `{"reason": "...", "error": "..."}`.

Two fields, two jobs. `reason` is the field of Pulsar's own error body (`ErrorData`),
the one the Java admin client and pulsar-admin show the user, and it is as stable as
Pulsar's: Pulsar's fixed text where Pulsar has one for the same failure
("ResourceGroup is in use"), otherwise the HTTP status phrase ("Bad Request"), which
is what Pulsar's web layer answers when it rejects a request before any handler has a
word for it. `error` is rgd's specific message: the field, what was expected, the
allowed range. Scripts match on `reason`; people read `error`.

Two pieces instead of an aiohttp middleware: `json_errors`, a decorator on each
route handler, and `no_route`, a catch-all route registered last for 404/405. A
middleware would run on every request, together with the current-app wrapper
aiohttp adds whenever an app has one: about 4 µs of a single acquire's ~20 µs
handler budget (measured with bench/bench_acquire.py).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from http import HTTPStatus

import orjson
from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    close_connection = False  # answer with `Connection: close` (the request was not read whole)

    def __init__(self, status: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason or status_phrase(status)


def status_phrase(status: int) -> str:
    """The HTTP reason phrase of `status` ("Bad Request"): `reason` where Pulsar has no text of its own."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def json_response(doc: object, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(doc), status=status, content_type="application/json", headers=headers
    )


def error_body(status: int, message: str, reason: str | None = None) -> dict[str, str]:
    return {"reason": reason or status_phrase(status), "error": message}


def error_response(status: int, message: str, reason: str | None = None,
                   headers: dict[str, str] | None = None) -> web.Response:
    return json_response(error_body(status, message, reason), status, headers)


def http_error_response(exc: web.HTTPException) -> web.Response:
    """aiohttp's own HTTP errors (413 from reading a body, ...) as JSON."""
    message = exc.reason
    if exc.status == 413:
        message = f"request body too large ({exc.text})"
    response = error_response(exc.status, message)
    if "Allow" in exc.headers:
        response.headers["Allow"] = exc.headers["Allow"]
    return response


def as_json_error(request: web.Request, exc: Exception) -> web.Response:
    """The JSON answer for an `ApiError` or an aiohttp HTTP error (re-raised below 400)."""
    if isinstance(exc, ApiError):
        response = error_response(exc.status, exc.message, exc.reason)
        if exc.close_connection:
            response.force_close()
        return response
    if isinstance(exc, web.HTTPException) and exc.status >= 400:
        return http_error_response(exc)
    raise exc


def json_errors(handler: Handler) -> Handler:
    """Route decorator: `ApiError` and aiohttp's HTTP errors raised in `handler` become
    JSON bodies. (/v1/acquire catches them itself, saving this frame.)"""

    @functools.wraps(handler)
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except (ApiError, web.HTTPException) as exc:
            return as_json_error(request, exc)

    return handle


NO_ROUTE = "no-route"  # the catch-all's route name, so tools listing the API can skip it
NO_ROUTE_PATH = "/{path:.*}"


async def no_route(request: web.Request) -> web.Response:
    """The catch-all: aiohttp's router tries it only after every other resource, so
    reaching it means no route takes this method on this path. A 405 if another
    resource matches the path (RFC 9110: with `Allow`), else a 404."""
    own = request.match_info.route.resource
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource is not own:
            _, methods = await resource.resolve(request)
            allowed |= methods
    if allowed:
        return error_response(405, f"method {request.method} not allowed on {request.path}",
                              headers={"Allow": ",".join(sorted(allowed))})
    return error_response(404, f"no route for {request.method} {request.path}")


def add_fallback_route(app: web.Application) -> None:
    """Register last: the catch-all must not shadow a real route."""
    app.router.add_route("*", NO_ROUTE_PATH, no_route, name=NO_ROUTE)


__all__ = [
    "NO_ROUTE", "NO_ROUTE_PATH", "ApiError", "add_fallback_route", "as_json_error", "bad_request",
    "error_body", "error_response", "http_error_response", "json_errors", "json_response", "no_route",
    "status_phrase",
]

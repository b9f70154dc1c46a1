"""Every error the API returns is JSON `{"error": "..."}` naming what is wrong."""

from __future__ import annotations

from typing import Awaitable, Callable

import orjson
from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def json_response(doc: object, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(doc), status=status, content_type="application/json", headers=headers
    )


def error_response(status: int, message: str) -> web.Response:
    return json_response({"error": message}, status)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn our ApiError and aiohttp's own HTTP errors (404, 405, 413) into JSON bodies."""
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.reason
        if exc.status == 404:
            message = f"no route for {request.method} {request.path}"
        elif exc.status == 405:
            message = f"method {request.method} not allowed on {request.path}"
        elif exc.status == 413:
            message = f"request body too large ({exc.text})"
        response = error_response(exc.status, message)
        if "Allow" in exc.headers:  # RFC 9110: a 405 lists what is allowed
            response.headers["Allow"] = exc.headers["Allow"]
        return response

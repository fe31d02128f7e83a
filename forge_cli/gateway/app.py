"""The FastAPI application: routes, the body-size limit, metrics, and errors in each provider's shape."""

from __future__ import annotations

import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from forge_cli.gateway.errors import APIError, error_response
from forge_cli.gateway.state import GatewayState

MAX_BODY_BYTES = 16 * 1024 * 1024


def create_app(state: GatewayState, *, max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    from forge_cli.gateway.routes import admin, chat, completions, messages, responses

    app = FastAPI(title="Forge gateway", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.gateway = state
    app.state.max_body_bytes = max_body_bytes
    app.include_router(chat.router)
    app.include_router(messages.router)
    app.include_router(responses.router)
    app.include_router(completions.router)
    app.include_router(admin.router)

    @app.middleware("http")
    async def limits_and_metrics(request: Request, call_next):
        endpoint = request.scope.get("route").path if request.scope.get("route") else request.url.path
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > max_body_bytes:
            err = APIError(413, f"the request body is {int(length)} bytes; the limit is {max_body_bytes}")
            return error_response(request.url.path, err)
        state.metrics.in_flight.inc()
        started = time.perf_counter()
        try:
            response = await call_next(request)
        finally:
            state.metrics.in_flight.dec()
        route = request.scope.get("route")
        endpoint = route.path if route is not None else "unmatched"
        state.metrics.requests.labels(endpoint, str(response.status_code)).inc()
        state.metrics.latency.labels(endpoint).observe(time.perf_counter() - started)
        return response

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(request.url.path, exc)

    @app.exception_handler(Exception)
    async def server_fault(request: Request, exc: Exception) -> JSONResponse:
        # the server's fault, never the client's: still the provider's error shape
        err = APIError(500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error")
        response = error_response(request.url.path, err)
        response.status_code = 500
        return response

    @app.exception_handler(404)
    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return error_response(request.url.path, APIError(404, f"no endpoint {request.method} {request.url.path}"))

    @app.exception_handler(405)
    async def bad_method(request: Request, exc: Exception) -> JSONResponse:
        return error_response(request.url.path, APIError(405, f"{request.method} is not allowed on {request.url.path}"))

    return app

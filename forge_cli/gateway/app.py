"""The FastAPI application: routes, ``/openapi.json``, errors in each provider's shape, and the
outer ASGI layer (:mod:`.middleware`: body size and time limits, HEAD, metrics, 500s)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from forge_cli.gateway.errors import APIError, error_response
from forge_cli.gateway.middleware import Guard
from forge_cli.gateway.openapi import document
from forge_cli.gateway.state import GatewayState

MAX_BODY_BYTES = 16 * 1024 * 1024
BODY_TIMEOUT_S = 30.0  # a request's whole body must arrive within this long of its headers


def create_app(state: GatewayState, *, max_body_bytes: int = MAX_BODY_BYTES, body_timeout_s: float = BODY_TIMEOUT_S) -> FastAPI:
    from forge_cli.gateway.routes import admin, chat, completions, gemini, messages, ollama, responses

    app = FastAPI(title="Forge gateway", docs_url=None, redoc_url=None, openapi_url="/openapi.json")
    app.state.gateway = state
    app.state.max_body_bytes = max_body_bytes
    app.include_router(chat.router)
    app.include_router(messages.router)
    app.include_router(responses.router)
    app.include_router(completions.router)
    app.include_router(gemini.router)
    app.include_router(ollama.router)
    app.include_router(admin.router)
    app.add_middleware(Guard, state=state, max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(request.url.path, exc)

    @app.exception_handler(404)
    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return error_response(request.url.path, APIError(404, f"no endpoint {_method(request)} {request.url.path}"))

    @app.exception_handler(405)
    async def bad_method(request: Request, exc: Exception) -> JSONResponse:
        return error_response(request.url.path, APIError(405, f"{_method(request)} is not allowed on {request.url.path}"))

    return app


def _method(request: Request) -> str:
    return request.scope.get("forge.method", request.method)  # HEAD is routed as GET

"""Client errors in each provider's own shape, always 4xx, with a message that says what was wrong."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse
from pydantic import ValidationError


class APIError(Exception):
    """A request the gateway refuses. ``status`` is 4xx; ``param`` names the offending field."""

    def __init__(self, status: int, message: str, *, param: str | None = None, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind


def describe_validation(exc: ValidationError, prefix: str = "") -> tuple[str, str | None]:
    """The first pydantic error as 'field.path: what is wrong (got …)'."""
    err = exc.errors()[0]
    loc = prefix
    for part in err["loc"]:
        loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
    got = err.get("input")
    shown = "" if isinstance(got, (dict, list)) or got is None else f" (got {str(got)[:60]!r})"
    what = "is required" if err["type"] == "missing" else err["msg"]
    more = f"; {len(exc.errors()) - 1} more problem(s)" if len(exc.errors()) > 1 else ""
    return f"{loc}: {what}{shown}{more}", loc or None


def openai_error(err: APIError) -> JSONResponse:
    body = {"error": {"message": err.message, "type": err.kind, "param": err.param, "code": None}}
    return JSONResponse(body, status_code=err.status)


def anthropic_error(err: APIError) -> JSONResponse:
    kind = {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 413: "request_too_large",
            429: "rate_limit_error"}.get(err.status, "invalid_request_error")
    return JSONResponse({"type": "error", "error": {"type": kind, "message": err.message}}, status_code=err.status)


def error_response(path: str, err: APIError) -> JSONResponse:
    return anthropic_error(err) if "/v1/messages" in path else openai_error(err)


def sse(data: Any, event: str | None = None) -> str:
    import json

    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data if isinstance(data, str) else json.dumps(data, separators=(',', ':'))}\n\n"

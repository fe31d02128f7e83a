"""Errors in each provider's own shape: 4xx for the client's mistakes, with a message that says what was wrong."""

from __future__ import annotations

import json
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
    """The first problem as 'field.path: what is wrong (got …)'; the alternatives of a union at
    the same field are joined with "or", and other fields' problems are counted."""
    first: list[tuple[str, dict[str, Any]]] = []
    others: list[str] = []
    for err in exc.errors():
        loc = _loc(prefix, err["loc"])
        if not first or loc == first[0][0]:
            first.append((loc, err))
        elif loc not in others:
            others.append(loc)
    loc, err = first[0]
    got = err.get("input")
    shown = "" if isinstance(got, (dict, list)) or got is None else f" (got {_short(got)})"
    msgs = list(dict.fromkeys("is required" if e["type"] == "missing" else e["msg"] for _, e in first))
    lead = "Input should be "
    if len(msgs) > 1 and all(m.startswith(lead) for m in msgs):  # a union: the forms it accepts
        what = lead + ", or ".join(m[len(lead):] for m in msgs)
    else:
        what = " or ".join(msgs)
    more = f"; also wrong: {', '.join(others[:3])}" + (f" and {len(others) - 3} more" if len(others) > 3 else "") if others else ""
    return f"{loc}: {what}{shown}{more}", loc or None


_TYPE_TAGS = {"str", "int", "float", "bool", "dict", "list", "none"}


def _loc(prefix: str, parts: tuple[Any, ...]) -> str:
    loc = prefix
    for part in parts:
        if isinstance(part, str) and ("[" in part or part[:1].isupper() or part in _TYPE_TAGS):
            continue  # pydantic's tag for one member of a union (literal[...], a model's class name, str)
        loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
    return loc


def _short(value: Any) -> str:
    return repr(value[:60]) if isinstance(value, str) else repr(value)


def _text(value: str | None) -> str | None:
    """Always sendable: text that cannot be UTF-8 (a lone surrogate echoed from a request) is escaped."""
    return None if value is None else value.encode("utf-8", "backslashreplace").decode("utf-8")


def openai_error(err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"message": _text(err.message), "type": err.kind, "param": _text(err.param), "code": None}}
    return JSONResponse(body, status_code=err.status, headers=headers)


def anthropic_error(err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
    kind = {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 408: "timeout_error",
            413: "request_too_large", 429: "rate_limit_error"}.get(err.status, "invalid_request_error")
    if err.status >= 500:
        kind = "api_error"
    return JSONResponse({"type": "error", "error": {"type": kind, "message": _text(err.message)}}, status_code=err.status,
                        headers=headers)


# Google's canonical status names (google.rpc.Code), as the Gemini API's errors carry them
_GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                  405: "UNIMPLEMENTED", 408: "DEADLINE_EXCEEDED", 409: "ABORTED", 413: "INVALID_ARGUMENT",
                  429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}


def gemini_error(err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
    """The Gemini API's shape: ``{"error": {"code", "message", "status"}}``."""
    status = _GOOGLE_STATUS.get(err.status, "INTERNAL" if err.status >= 500 else "FAILED_PRECONDITION")
    body = {"error": {"code": err.status, "message": _text(err.message), "status": status}}
    return JSONResponse(body, status_code=err.status, headers=headers)


def ollama_error(err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
    """Ollama's shape: ``{"error": "message"}``."""
    return JSONResponse({"error": _text(err.message)}, status_code=err.status, headers=headers)


def api_of(path: str) -> str:
    """Which API a request path belongs to: ``anthropic``, ``gemini``, ``ollama`` or ``openai`` (the
    rest, the admin endpoints included). A ``/s/<session>`` prefix is looked through."""
    if path.startswith("/s/"):
        path = "/" + path.split("/", 3)[3] if path.count("/") >= 3 else path
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith("/v1beta/"):
        return "gemini"
    if path.startswith("/api/"):
        return "ollama"
    return "openai"


_SHAPES = {"anthropic": anthropic_error, "gemini": gemini_error, "ollama": ollama_error, "openai": openai_error}


def error_response(path: str, err: APIError, *, close: bool = False) -> JSONResponse:
    """``err`` in the shape of the API ``path`` belongs to (:func:`api_of`); ``close``: say ``Connection: close``."""
    headers = {"connection": "close"} if close else None
    return _SHAPES[api_of(path)](err, headers)


def sse(data: Any, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data if isinstance(data, str) else json.dumps(data, separators=(',', ':'))}\n\n"

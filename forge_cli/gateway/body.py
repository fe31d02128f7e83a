"""A request body as JSON the gateway can always answer: bounded depth, finite numbers, valid text.

``json.loads`` accepts what the rest of the gateway cannot: nesting deep enough to overflow the
stack of whatever walks it later (a ``RecursionError``), ``NaN``/``Infinity`` (which no response
may echo: JSON has no such numbers), and ``\\ud800`` escapes that decode to a lone surrogate (a
``str`` that cannot be encoded as UTF-8, so neither tokenised, stored, nor sent back). Each is a
400 here, before anything is rendered, generated or recorded.
"""

from __future__ import annotations

import json
import math
from typing import Any

from forge_cli.gateway.errors import APIError

MAX_JSON_DEPTH = 64  # a request's own nesting is ~6; tool schemas add two levels per nested object


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(body: bytes) -> Any:
    """``body`` as JSON, or an :class:`APIError` (400) that says what is wrong and where."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise APIError(400, f"the request body is not valid UTF-8: {exc}") from None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise APIError(400, f"the request body is nested more than {MAX_JSON_DEPTH} levels deep") from None
    except ValueError as exc:
        raise APIError(400, f"the request body is not valid JSON: {exc}") from None
    check_json(data)
    return data


def _where(path: tuple[Any, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the request body"


def _bad_text(s: str) -> bool:
    if s.isascii():
        return False
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_json(data: Any) -> None:
    """Raise a 400 naming the first place where ``data`` is nested more than
    :data:`MAX_JSON_DEPTH` deep, holds a non-finite number, or text that is not valid Unicode."""
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(data, 0, ())]
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, str):
            if _bad_text(value):
                raise APIError(400, f"{_where(path)}: the text holds a lone surrogate (an unpaired \\ud800-\\udfff "
                                    "escape), which is not valid Unicode", param=_where(path))
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise APIError(400, f"{_where(path)}: numbers must be finite (got {value})", param=_where(path))
        elif isinstance(value, (dict, list)):
            if depth >= MAX_JSON_DEPTH:
                raise APIError(400, f"the request body is nested more than {MAX_JSON_DEPTH} levels deep (at {_where(path)})")
            if isinstance(value, dict):
                for key, item in value.items():
                    if _bad_text(key):
                        raise APIError(400, f"{_where(path)}: a key holds a lone surrogate, which is not valid Unicode",
                                       param=_where(path))
                    stack.append((item, depth + 1, (*path, key)))
            else:
                stack.extend((item, depth + 1, (*path, i)) for i, item in enumerate(value))

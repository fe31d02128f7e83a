"""Pieces the tool-call formats share: JSON call objects, argument values in markup, scanning."""

from __future__ import annotations

import json
from typing import Any

from forge_cli.specs import ParseError, ToolCall


def dumps(value: Any) -> str:
    """JSON that never contains ``</`` (``<\\/`` is the same JSON string), so it cannot close a tag."""
    return json.dumps(value, ensure_ascii=False).replace("</", "<\\/")


def call_from_obj(obj: Any, args_keys: tuple[str, ...] = ("arguments", "parameters")) -> ToolCall:
    """``{"name": str, "arguments": object|str}`` → ToolCall; ValueError says what is wrong."""
    if not isinstance(obj, dict):
        raise ValueError("a tool call must be a JSON object")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("missing string field 'name'")
    args: Any = {}
    for key in args_keys:
        if key in obj:
            args = obj[key]
            break
    if not isinstance(args, (dict, str)):
        raise ValueError("'arguments' must be an object (or a string for freeform tools)")
    return ToolCall(name=name, arguments=args)


def decode_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at char {exc.pos})") from None


def encode_value(value: Any) -> str:
    """An argument value inside markup: a plain string as itself, anything else (or a string
    that would read back as something else) as JSON."""
    if isinstance(value, str) and value and value == value.strip() and "</" not in value and "<" not in value[:1]:
        try:
            json.loads(value)
        except ValueError:
            return value
    return dumps(value)


def decode_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_error(text: str, exc: Exception) -> ParseError:
    return ParseError(text=text, reason=str(exc))

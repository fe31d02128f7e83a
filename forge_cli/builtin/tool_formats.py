"""Built-in tool-call formats.

Each is a :class:`~forge_cli.specs.ToolFormat` registered through ``register_tool_formats``, the
hook third parties use. (The full set — Qwen/MiniMax XML, Llama-3 JSON, Mistral, DeepSeek, GLM,
Kimi, ReAct, fenced JSON, XML tags — is tracked in the gateway issue.)
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from forge_cli import hookimpl
from forge_cli.specs import ParsedOutput, ParseError, ToolCall, ToolFormat


def _decode_call(payload: str) -> ToolCall:
    """``{"name": str, "arguments": object|str}`` → ToolCall; raises ValueError with the reason."""
    try:
        obj = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(obj, dict):
        raise ValueError("a tool call must be a JSON object")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("missing string field 'name'")
    args: Any = obj.get("arguments", obj.get("parameters", {}))
    if not isinstance(args, (dict, str)):
        raise ValueError("'arguments' must be an object (or a string for freeform tools)")
    return ToolCall(name=name, arguments=args)


class HermesFormat(ToolFormat):
    """Hermes / Qwen2.5 style: ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``."""

    name = "hermes"
    description = 'Hermes/Qwen2.5: <tool_call>{"name": ..., "arguments": {...}}</tool_call>, tools listed in <tools>.'

    _BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)

    def render_tools(self, tools: list[dict[str, Any]]) -> str:
        listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        return (
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{listing}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        )

    def format_calls(self, calls: list[ToolCall]) -> str:
        return "\n".join(
            "<tool_call>\n"
            # "<\/" is the same JSON string as "</", and keeps a "</tool_call>" inside an
            # argument from closing the block early.
            + json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False).replace("</", "<\\/")
            + "\n</tool_call>"
            for c in calls
        )

    def parse(self, text: str) -> ParsedOutput:
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        pieces: list[str] = []
        last = 0
        for match in self._BLOCK.finditer(text):
            pieces.append(text[last : match.start()])
            last = match.end()
            try:
                calls.append(_decode_call(match.group(1).strip()))
            except ValueError as exc:
                errors.append(ParseError(text=match.group(0), reason=str(exc)))
        pieces.append(text[last:])
        return ParsedOutput(content="".join(pieces).strip(), calls=calls, errors=errors)


@hookimpl
def register_tool_formats(register: Callable[[ToolFormat], None]) -> None:
    register(HermesFormat())

"""An example Forge plugin: the ``sexpr`` tool-call format and the ``example-sexpr`` scaffold.

The scaffold's loop lives in :mod:`forge_scaffold_example.loop` and is named by reference, so
Forge finds it at registration without importing it (``forge --help`` stays fast).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from forge_cli import hookimpl
from forge_cli.specs import ParsedOutput, ParseError, ScaffoldSpec, ToolCall, ToolFormat


class SexprFormat(ToolFormat):
    """Tool calls written as ``(call NAME {"arg": ...})``, one per call."""

    name = "sexpr"
    markers = ("(call",)
    description = 'Lisp-flavoured calls: (call NAME {"arg": value}).'

    _START = re.compile(r"\(call\s+([A-Za-z_][\w.-]*)\s*")

    def render_tools(self, tools: list[dict[str, Any]]) -> str:
        lines = ["You can use these tools:"]
        for tool in tools:
            fn = tool.get("function", tool)
            lines.append(f"- {fn['name']}: {fn.get('description', '')} parameters: {json.dumps(fn.get('parameters', {}))}")
        lines.append('To call a tool write (call NAME {"argument": value}) on its own line.')
        return "\n".join(lines)

    def format_calls(self, calls: list[ToolCall]) -> str:
        return "\n".join(f"(call {c.name} {json.dumps(c.arguments, ensure_ascii=False)})" for c in calls)

    def parse(self, text: str) -> ParsedOutput:
        decoder = json.JSONDecoder()
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        content: list[str] = []
        pos = 0
        while (match := self._START.search(text, pos)) is not None:
            content.append(text[pos : match.start()])
            try:
                args, end = decoder.raw_decode(text, match.end())
                if not isinstance(args, (dict, str)):
                    raise ValueError("arguments must be a JSON object")
                close = re.compile(r"\s*\)").match(text, end)
                if close is None:
                    raise ValueError("missing ')' after the arguments")
                calls.append(ToolCall(name=match.group(1), arguments=args))
                pos = close.end()
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                line_end = text.find("\n", match.end())
                pos = len(text) if line_end == -1 else line_end
                errors.append(ParseError(text=text[match.start() : pos], reason=str(exc)))
        content.append(text[pos:])
        return ParsedOutput(content="".join(content).strip(), calls=calls, errors=errors)


class ExampleOptions(BaseModel):
    """Options of ``[scaffolds.example-sexpr]``."""

    model_config = ConfigDict(extra="forbid")

    persona: str = Field("You are a careful assistant.", description="Prepended to the system prompt.")
    keep_last: int = Field(3, ge=1, description="Turns kept in context (the keep-last-k policy's option).")
    max_turns: int = Field(8, gt=0, description="Model calls before the episode is cut off.")
    max_tokens: int = Field(256, gt=0, description="Largest completion per turn, in tokens.")


@hookimpl
def register_tool_formats(register: Callable[[ToolFormat], None]) -> None:
    register(SexprFormat())


@hookimpl
def register_scaffolds(register: Callable[[ScaffoldSpec], None]) -> None:
    register(
        ScaffoldSpec(
            name="example-sexpr",
            kind="white",
            family="tool-loop",
            loop="forge_scaffold_example.loop:SexprLoop",
            context_policy="keep-last-k",
            tool_format="sexpr",
            description="Example plugin: a tool loop with s-expression tool calls and a persona, keeping the last k turns.",
            options=ExampleOptions,
        )
    )

"""Formats whose calls are markup with one element per argument: plain XML tags (the families'
markup formats, Qwen3-Coder, MiniMax-M2, GLM-4.5, are vLLM's parsers: forge_cli.toolformats.vllm_parsers).
Argument values are written as text; non-strings (and strings that would
read back as something else) as JSON — see :func:`~forge_cli.toolformats.common.encode_value`."""

from __future__ import annotations

import json
import re
from typing import Any

from forge_cli.specs import ParsedOutput, ParseError, ToolCall, ToolFormat
from forge_cli.toolformats.common import decode_value, encode_value

NAME = r"[A-Za-z_][\w.\-]*"


def _tool_list(tools: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)


class _Markup(ToolFormat):
    """Blocks matched by ``block`` (group ``name``, group ``body``); arguments by ``arg`` (``key``, ``value``)."""

    freeform_arguments = False  # arguments are always an object of named values
    block: re.Pattern[str]
    arg: re.Pattern[str]
    example: str = ""

    def render_tools(self, tools: list[dict[str, Any]]) -> str:
        return f"# Tools\n\nYou can call these functions:\n<tools>\n{_tool_list(tools)}\n</tools>\n\nTo call a function write:\n{self.example}"

    def wrap(self, name: str, args: str) -> str:
        raise NotImplementedError

    def one_arg(self, key: str, value: str) -> str:
        raise NotImplementedError

    def format_calls(self, calls: list[ToolCall]) -> str:
        out = []
        for c in calls:
            args = c.arguments if isinstance(c.arguments, dict) else {"input": c.arguments}
            out.append(self.wrap(c.name, "".join(self.one_arg(k, encode_value(v)) for k, v in args.items())))
        return "\n".join(out)

    def read_args(self, body: str) -> dict[str, Any]:
        args: dict[str, Any] = {}
        pos = 0
        for m in self.arg.finditer(body):
            if body[pos : m.start()].strip():
                raise ValueError(f"unexpected text between arguments: {body[pos:m.start()].strip()[:40]!r}")
            args[m.group("key")] = decode_value(m.group("value"))
            pos = m.end()
        if body[pos:].strip():
            raise ValueError(f"unexpected text after the arguments: {body[pos:].strip()[:40]!r}")
        return args

    def parse(self, text: str) -> ParsedOutput:
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        pieces: list[str] = []
        last = 0
        for m in self.block.finditer(text):
            pieces.append(text[last : m.start()])
            last = m.end()
            try:
                calls.append(ToolCall(name=m.group("name"), arguments=self.read_args(m.group("body"))))
            except ValueError as exc:
                errors.append(ParseError(text=m.group(0), reason=str(exc)))
        pieces.append(text[last:])
        content = "".join(pieces)
        for opener in self.unclosed_markers():
            if opener in content:
                at = content.index(opener)
                errors.append(ParseError(text=content[at:], reason="a tool call was opened but never closed"))
                content = content[:at]
                break
        return ParsedOutput(content=content.strip(), calls=calls, errors=errors)

    def unclosed_markers(self) -> tuple[str, ...]:
        return ()


class XmlTagsFormat(_Markup):
    """``<tool_name><arg>value</arg></tool_name>`` (Cline/Claude-style). An element counts as a
    call only when its body is nothing but argument elements."""

    markers = ("<",)
    name = "xml-tags"
    description = "XML tags: <TOOL_NAME><ARG>value</ARG>…</TOOL_NAME>."
    example = "<TOOL_NAME>\n<ARG>value</ARG>\n</TOOL_NAME>"
    block = re.compile(rf"<(?P<name>{NAME})>(?P<body>(?:\s*<(?P<k>{NAME})>.*?</(?P=k)>)*\s*)</(?P=name)>", re.DOTALL)
    arg = re.compile(rf"<(?P<key>{NAME})>(?P<value>.*?)</(?P=key)>", re.DOTALL)

    def wrap(self, name: str, args: str) -> str:
        return f"<{name}>\n{args}</{name}>"

    def one_arg(self, key: str, value: str) -> str:
        return f"<{key}>{value}</{key}>\n"

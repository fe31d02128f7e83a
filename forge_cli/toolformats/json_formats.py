"""Formats whose calls are JSON objects: Hermes, ReAct, fenced JSON."""

from __future__ import annotations

import json
import re
from typing import Any

from forge_cli.specs import ParsedOutput, ParseError, ToolCall, ToolFormat
from forge_cli.toolformats.common import call_from_obj, decode_json, dumps, parse_error

_DECODER = json.JSONDecoder()


def _tool_list(tools: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)


class _Delimited(ToolFormat):
    """Calls wrapped in ``open … close`` markers, each holding ``body(call)``."""

    open: str = ""
    close: str = ""
    instructions: str = ""

    def body(self, call: ToolCall) -> str:
        return dumps({"name": call.name, "arguments": call.arguments})

    def read(self, body: str) -> ToolCall:
        return call_from_obj(decode_json(body))

    def render_tools(self, tools: list[dict[str, Any]]) -> str:
        return f"# Tools\n\nYou can call these functions:\n{_tool_list(tools)}\n\n{self.instructions}"

    def format_calls(self, calls: list[ToolCall]) -> str:
        return "\n".join(f"{self.open}{self.body(c)}{self.close}" for c in calls)

    def parse(self, text: str) -> ParsedOutput:
        # match the markers without their surrounding whitespace: models drop or add newlines
        pattern = re.compile(re.escape(self.open.strip()) + r"(.*?)(?:" + re.escape(self.close.strip()) + r"|\Z)", re.DOTALL)
        calls, errors, pieces, last = [], [], [], 0
        for match in pattern.finditer(text):
            pieces.append(text[last : match.start()])
            last = match.end()
            try:
                calls.append(self.read(match.group(1).strip()))
            except ValueError as exc:
                errors.append(parse_error(match.group(0), exc))
        pieces.append(text[last:])
        return ParsedOutput(content="".join(pieces).strip(), calls=calls, errors=errors)


class HermesFormat(_Delimited):
    """Hermes / Qwen2.5: ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``."""

    markers = ("<tool_call>",)
    name = "hermes"
    description = 'Hermes/Qwen2.5: <tool_call>{"name": ..., "arguments": {...}}</tool_call>, tools listed in <tools>.'
    open, close = "<tool_call>\n", "\n</tool_call>"

    def render_tools(self, tools: list[dict[str, Any]]) -> str:
        return (
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{_tool_list(tools)}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        )


class HermesUnlistedFormat(HermesFormat):
    """Hermes calls with the tools left out of the prompt: for a model trained on its tools.

    The tools still travel in the request, so the gateway checks every call against them (the process
    reward's unknown tool and invalid arguments). The embedded default is such a model: the warm start
    teaches it its tools, and the ~250 tokens of the Hermes listing (JSON with example numbers) only
    distracted it — its warm start reached 17.6 % sampled held-out success in 8 minutes without them,
    6.5 % in 9 with them (benchmarks/RESULTS.md, "Learning").
    """

    name = "hermes-unlisted"
    description = "Hermes calls; the tools are checked but not listed in the prompt (a model trained on its tools)."

    def render_tools(self, tools: list[dict[str, Any]]) -> str:
        return ""


class FencedJsonFormat(_Delimited):
    """A fenced block: ```` ```json {"name": …, "arguments": {…}} ``` ````."""

    markers = ("```json",)
    name = "json-block"
    description = 'A fenced ```json block holding {"name": ..., "arguments": {...}}.'
    open, close = "```json\n", "\n```"
    instructions = 'To call a function write a fenced block:\n```json\n{"name": "FUNCTION", "arguments": {...}}\n```'

    def body(self, call: ToolCall) -> str:
        # \u0060 is a backtick in JSON: an argument cannot end the fence
        return super().body(call).replace("`", "\\u0060")

    def read(self, body: str) -> ToolCall:
        obj = decode_json(body)
        if not (isinstance(obj, dict) and "name" in obj and ("arguments" in obj or "parameters" in obj)):
            raise ValueError('a call block needs "name" and "arguments"')
        return call_from_obj(obj)


class ReActFormat(ToolFormat):
    """ReAct text: ``Action: NAME`` then ``Action Input: {json}``."""

    markers = ("Action:",)
    name = "react"
    description = "ReAct: 'Thought: …', then 'Action: NAME' and 'Action Input: {json}' lines."

    def render_tools(self, tools: list[dict[str, Any]]) -> str:
        names = ", ".join(t.get("function", t).get("name", "?") for t in tools)
        return (
            f"You have access to the following tools:\n{_tool_list(tools)}\n\nUse this format:\n"
            "Thought: what to do next\nAction: the tool to use, one of [" + names + "]\n"
            "Action Input: the input to the tool, as JSON\nObservation: the result (given to you)\n"
            "... (repeat as needed), then give the final answer."
        )

    def format_calls(self, calls: list[ToolCall]) -> str:
        return "\n".join(f"Action: {c.name}\nAction Input: {dumps(c.arguments)}" for c in calls)

    def parse(self, text: str) -> ParsedOutput:
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        pieces: list[str] = []
        pos = 0
        for match in re.finditer(r"(?m)^Action:[ \t]*(.+?)[ \t]*\nAction Input:[ \t]*", text):
            if match.start() < pos:
                continue
            pieces.append(text[pos : match.start()])
            try:
                value, end = _DECODER.raw_decode(text, match.end())
                if not isinstance(value, (dict, str)):
                    raise ValueError("Action Input must be a JSON object")
                calls.append(ToolCall(name=match.group(1), arguments=value))
                pos = end
            except ValueError as exc:
                line_end = text.find("\n", match.end())
                pos = len(text) if line_end == -1 else line_end
                errors.append(ParseError(text=text[match.start() : pos], reason=str(exc)))
        pieces.append(text[pos:])
        return ParsedOutput(content="".join(pieces).strip(), calls=calls, errors=errors)

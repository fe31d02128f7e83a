"""vLLM's tool-call and reasoning parsers, each under vLLM's own name (vLLM is imported only when
a gateway binds one: :mod:`forge_cli.toolformats.vllm_parsers`)."""

from __future__ import annotations

from typing import Callable

from forge_cli import hookimpl
from forge_cli.specs import ReasoningParser, ToolFormat
from forge_cli.toolformats.vllm_parsers import FORGE_KEEPS, REASONING_PARSERS, TOOL_PARSERS, VLLMReasoningParser, VLLMToolFormat


@hookimpl
def register_tool_formats(register: Callable[[ToolFormat], None]) -> None:
    for name in TOOL_PARSERS:
        if name not in FORGE_KEEPS:
            register(VLLMToolFormat(name))


@hookimpl
def register_reasoning_parsers(register: Callable[[ReasoningParser], None]) -> None:
    for name in REASONING_PARSERS:
        register(VLLMReasoningParser(name))

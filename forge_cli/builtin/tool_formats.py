"""Built-in tool-call formats, registered through ``register_tool_formats`` like a third party's."""

from __future__ import annotations

from typing import Callable

from forge_cli import hookimpl
from forge_cli.specs import ToolFormat
from forge_cli.toolformats.json_formats import (
    DeepSeekFormat,
    FencedJsonFormat,
    HermesFormat,
    HermesUnlistedFormat,
    KimiK2Format,
    Llama3JsonFormat,
    MistralFormat,
    ReActFormat,
)
from forge_cli.toolformats.xml_formats import GlmFormat, MiniMaxXmlFormat, Qwen3CoderFormat, XmlTagsFormat

BUILTIN_FORMATS = (
    HermesFormat, Qwen3CoderFormat, MiniMaxXmlFormat, Llama3JsonFormat, MistralFormat, DeepSeekFormat,
    GlmFormat, KimiK2Format, ReActFormat, FencedJsonFormat, XmlTagsFormat, HermesUnlistedFormat,
)

__all__ = ["BUILTIN_FORMATS", "HermesFormat"]


@hookimpl
def register_tool_formats(register: Callable[[ToolFormat], None]) -> None:
    for fmt in BUILTIN_FORMATS:
        register(fmt())

"""Built-in tool-call formats, registered through ``register_tool_formats`` like a third party's.

Forge's own formats write tools into the prompt as text (``rendering = "text"``): for a model whose
chat template takes no tools (the embedded default) and for prompt protocols of their own (ReAct,
fenced JSON, XML tags). ``native`` renders with the model's template and parses with its family's
parser; ``harmony`` renders and parses gpt-oss with openai-harmony; vLLM's parsers are registered
by :mod:`forge_cli.builtin.vllm_parsers`. Where a family has
a vLLM parser, Forge keeps no hand-written one (hermes excepted:
:data:`forge_cli.toolformats.vllm_parsers.FORGE_KEEPS` says why).
"""

from __future__ import annotations

from typing import Callable

from forge_cli import hookimpl
from forge_cli.specs import ToolFormat
from forge_cli.toolformats.harmony import HarmonyFormat
from forge_cli.toolformats.json_formats import FencedJsonFormat, HermesFormat, HermesUnlistedFormat, ReActFormat
from forge_cli.toolformats.native import NativeFormat
from forge_cli.toolformats.xml_formats import XmlTagsFormat

# the formats with text of their own (white-box scaffolds are made for each: forge_cli.builtin.scaffolds)
TEXT_FORMATS = (HermesFormat, ReActFormat, FencedJsonFormat, XmlTagsFormat, HermesUnlistedFormat)

__all__ = ["TEXT_FORMATS", "HermesFormat"]


@hookimpl
def register_tool_formats(register: Callable[[ToolFormat], None]) -> None:
    for fmt in TEXT_FORMATS:
        register(fmt())
    register(NativeFormat())
    register(HarmonyFormat())  # gpt-oss: vLLM's `openai` parser is a stub; harmony renders and parses

"""``native``: the model's own chat template renders tools and calls; its family's parser reads them.

A model trained with tools learned one prompt for them (its chat template's) and one call syntax
(what vLLM's parser for its family reads). ``native`` gives it exactly those: the request's tools go
to ``apply_chat_template(messages, tools=…)``, earlier assistant turns keep their structured
``tool_calls`` and thinking, tool results their ``tool_call_id`` and name (forge_cli.gateway.render),
and the output is parsed by ``model.tool_parser`` — by default the parser of the model's family
(:data:`FAMILY_PARSERS`, from ``config.json``'s ``model_type``).

:class:`ModelFormats` is what one gateway uses: every registered tool format bound to the model's
tokenizer on first use, the default format (``native`` when the template takes tools, else
``hermes``, Forge's own text for a model whose template takes none; and for the embedded
default, family ``forge``, which was trained on that text), and
the reasoning parser (``model.reasoning_parser``, by default the family's, ``none`` for none).
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from forge_cli.errors import ForgeError
from forge_cli.specs import ParsedOutput, ReasoningParser, ToolFormat, parse_calls

# config.json's model_type -> (tool-call parser, reasoning parser or None): vLLM's recommended
# parsers for the family (docs.vllm.ai, "Tool Calling" and "Reasoning Outputs")
FAMILY_PARSERS: dict[str, tuple[str, str | None]] = {
    "forge": ("hermes", None),  # the embedded default (forge_cli.run.FORGE_FAMILY): its template writes Hermes
    "qwen2": ("hermes", None),  # Qwen2.5
    "qwen2_moe": ("hermes", None),
    "qwen3": ("hermes", "qwen3"),
    "qwen3_moe": ("hermes", "qwen3"),
    "qwen3_next": ("hermes", "qwen3"),
    "qwen3_5": ("qwen3_coder", "qwen3"),
    "qwen3_5_moe": ("qwen3_coder", "qwen3"),
    "llama": ("llama3_json", None),  # Llama 3.1 / 3.2 / 3.3 (an older Llama's template takes no tools)
    "llama4": ("llama4_pythonic", None),
    "deepseek_v3": ("deepseek_v3", "deepseek_v3"),  # V3: no thinking unless asked (R1: --reasoning-parser deepseek_r1)
    "deepseek_v32": ("deepseek_v32", "deepseek_v3"),  # rendered by vLLM's V3.2 encoder (CODE_TEMPLATES)
    "deepseek_v4": ("deepseek_v4", "deepseek_v4"),  # rendered by vLLM's V4 encoder
    "mistral": ("mistral", None),
    "mistral3": ("mistral", "mistral"),
    "glm4_moe": ("glm45", "glm45"),
    "kimi_k2": ("kimi_k2", "kimi_k2"),
    "minimax_m2": ("minimax_m2", "minimax_m2_append_think"),
    "gpt_oss": ("harmony", None),  # harmony renders and parses, thinking included (vLLM's `openai` parser is a stub)
}
# model_type -> vLLM's wrapper that makes a tokenizer's apply_chat_template the family's own encoder
# (DeepSeek V3.2 and V4 ship Python encoders, not Jinja templates; vLLM serves them this way)
CODE_TEMPLATES: dict[str, tuple[str, str]] = {
    "deepseek_v32": ("vllm.tokenizers.deepseek_v32", "get_deepseek_v32_tokenizer"),
    "deepseek_v4": ("vllm.tokenizers.deepseek_v4", "get_deepseek_v4_tokenizer"),
}
PROBE_TOOL = "forge_probe_tool_7f3a"


def with_family_template(tokenizer: Any, model_type: str | None) -> Any:
    """The tokenizer whose ``apply_chat_template`` is the family's own encoder where the family
    ships one in code (:data:`CODE_TEMPLATES`: vLLM's DeepSeek encoders), else the tokenizer."""
    if model_type not in CODE_TEMPLATES:
        return tokenizer
    module, name = CODE_TEMPLATES[model_type]
    try:
        wrap = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ForgeError(f"{model_type}'s chat template is vLLM's encoder ({module}), which cannot be loaded: {exc}") from None
    return wrap(tokenizer)
NO_PARSER = "none"


def renders_own_ids(tokenizer: Any) -> bool:
    """A tokenizer whose chat template is code that makes the ids itself (mistral-common's, through
    transformers' ``MistralCommonBackend``): its rendered text does not encode back to them (special
    tokens in text are read as text), so its ids are taken as rendered."""
    return type(tokenizer).__name__ == "MistralCommonBackend"


def template_takes_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders the tools it is given (a probe tool's name
    appears in the rendering); mistral-common's code renders them."""
    if renders_own_ids(tokenizer):
        return True
    if not getattr(tokenizer, "chat_template", None):
        return False
    tools = [{"type": "function", "function": {"name": PROBE_TOOL, "description": "", "parameters": {"type": "object", "properties": {}}}}]
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tools=tools, tokenize=False, add_generation_prompt=True)
    except Exception:
        return False
    return PROBE_TOOL in str(text)


class NativeFormat(ToolFormat):
    """The model's template renders; ``parser`` (a bound tool format) parses. Unbound (``parser``
    None) as registered: a gateway makes the bound one for its model (:class:`ModelFormats`)."""

    name = "native"
    description = "The model's own chat template renders tools and calls; its family's tool parser (model.tool_parser) reads them."
    rendering = "template"

    def __init__(self, parser: ToolFormat | None = None) -> None:
        self.parser = parser
        self.markers = parser.markers if parser is not None else ()

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParsedOutput:
        if self.parser is None:
            raise ForgeError("tool format 'native' needs a model: a gateway binds it to the model's parser")
        return parse_calls(self.parser, text, tools or [])


class ModelFormats:
    """One model's tool formats (bound on first use), its default format and its reasoning parser.

    ``model_type``: ``config.json``'s (None where unknown); ``tool_format``: the default format's
    name (None: ``native`` when the template takes tools, else ``hermes``); ``tool_parser`` and
    ``reasoning_parser``: vLLM names (None: the family's; ``"none"``: no reasoning parser).
    Unknown names and a template that takes tools with no parser to read them are ForgeErrors.
    """

    def __init__(self, tokenizer: Any, formats: dict[str, ToolFormat], reasoning_parsers: dict[str, ReasoningParser] | None = None,
                 *, model_type: str | None = None, tool_format: str | None = None, tool_parser: str | None = None,
                 reasoning_parser: str | None = None) -> None:
        self.tokenizer = with_family_template(tokenizer, model_type)  # what renders and reads (DeepSeek V3.2/V4: vLLM's encoder)
        tokenizer = self.tokenizer
        self.formats = dict(formats)
        self.formats.setdefault("native", NativeFormat())
        self.reasoning_parsers = dict(reasoning_parsers or {})
        self.family = model_type or "unknown"
        self._bound: dict[str, ToolFormat] = {}
        self._lock = threading.RLock()  # binding native binds its parser
        family_tool, family_reasoning = FAMILY_PARSERS.get(model_type or "", (None, None))
        self.takes_tools = template_takes_tools(tokenizer)
        self.tool_parser = tool_parser or family_tool
        if self.tool_parser is not None:
            self.check(self.tool_parser, "model.tool_parser")
        if tool_format is None:  # the embedded model learned Forge's text, whatever its template can do
            code = self.tool_parser is not None and self.tool_parser in self.formats and self.formats[self.tool_parser].rendering == "code"
            tool_format = "native" if (self.takes_tools or code) and model_type != "forge" else "hermes"
        self.check(tool_format, "model.tool_format")
        self.default = tool_format
        if self.uses_template(tool_format) and not self.takes_tools and not self._code_native(tool_format):
            raise ForgeError(f"model.tool_format {tool_format!r} renders tools with the model's chat template, and this "
                             "model's template takes no tools: use a format with text of its own (hermes, react, …)")
        if tool_format == "native" and self.tool_parser is None:
            raise ForgeError(f"this model's chat template takes tools, and Forge cannot tell which parser reads its calls "
                             f"(model_type {model_type!r} is not one it knows): set model.tool_parser to one of vLLM's "
                             f"({', '.join(sorted(n for n, f in self.formats.items() if f.rendering == 'template' and n != 'native')[:12])}, …)")
        name = reasoning_parser or family_reasoning
        self.reasoning_name = None if name in (None, NO_PARSER) else name
        if self.reasoning_name is not None and self.reasoning_name not in self.reasoning_parsers:
            raise ForgeError(f"model.reasoning_parser: no reasoning parser named {self.reasoning_name!r} "
                             f"(registered: {', '.join(sorted(self.reasoning_parsers))}; 'none' for none)")
        self._reasoning: ReasoningParser | None = None
        self.get()  # the default, bound now: its errors belong to start-up, not to a first request
        self.reasoning()

    def check(self, name: str, what: str) -> None:
        if name not in self.formats:
            raise ForgeError(f"{what}: no tool format named {name!r} (registered: {', '.join(sorted(self.formats))})")

    def uses_template(self, name: str) -> bool:
        return self.formats[name].rendering == "template"

    def _code_native(self, name: str) -> bool:
        """``native`` for a family whose parser renders too (gpt-oss: harmony): no template needed."""
        return name == "native" and self.tool_parser in self.formats and self.formats[self.tool_parser].rendering == "code"

    def get(self, name: str | None = None) -> ToolFormat:
        """The format ``name`` (default: the model's default) bound to the model's tokenizer. The
        first use of a vLLM parser imports vLLM (seconds): call it off the event loop."""
        name = name or self.default
        bound = self._bound.get(name)
        if bound is not None:
            return bound
        with self._lock:
            if name not in self._bound:
                self._bound[name] = self._bind(name)
            return self._bound[name]

    def _bind(self, name: str) -> ToolFormat:
        self.check(name, "tool_format")
        if self.uses_template(name) and not self.takes_tools and not self._code_native(name):
            raise ForgeError(f"tool format {name!r} renders tools with the model's chat template, which takes none here")
        if name == "native":
            if self.tool_parser is None:
                raise ForgeError("tool format 'native': set model.tool_parser (this model's family has no known parser)")
            parser = self.get(self.tool_parser)
            return parser if parser.rendering == "code" else NativeFormat(parser)  # a code renderer is the family's own
        return self.formats[name].bind(self.tokenizer)

    def reasoning(self) -> ReasoningParser | None:
        """The model's reasoning parser bound to its tokenizer (None: none is used)."""
        if self.reasoning_name is None:
            return None
        with self._lock:
            if self._reasoning is None:
                self._reasoning = self.reasoning_parsers[self.reasoning_name].bind(self.tokenizer)
        return self._reasoning

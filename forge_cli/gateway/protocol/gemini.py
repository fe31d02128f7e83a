"""The Gemini API's request models (``generateContent``, ``streamGenerateContent``, ``countTokens``).

Every field is accepted by its camelCase name (what the REST API documents and the google-genai
SDKs send) and by its snake_case one, as Google accepts both. Fields the gateway does not use
(``safetySettings``, ``labels``, ``speechConfig``, …) are tolerated; the known ones have JSON's
types strictly (:mod:`.types`) and Google's documented ranges.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from forge_cli.engine.base import MAX_SEED
from forge_cli.gateway.protocol.types import MAX_TOKENS, Bool, Float, Int

MAX_CANDIDATES = 8  # Google's limit on candidateCount
MAX_STOP_SEQUENCES = 5  # and on stopSequences


class GeminiModel(BaseModel):
    """camelCase or snake_case by name; unknown fields kept, not used."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel, validate_by_name=True, validate_by_alias=True)


class FunctionCallIn(GeminiModel):
    name: str = Field(min_length=1)
    args: Optional[dict[str, Any]] = None
    id: Optional[str] = None


class FunctionResponseIn(GeminiModel):
    name: str = Field(min_length=1)
    response: Optional[dict[str, Any]] = None
    id: Optional[str] = None


class PartIn(GeminiModel):
    """One part of a turn: text (``thought``: the model's thinking), a function call or a function's result."""

    text: Optional[str] = None
    thought: Optional[Bool] = None
    thought_signature: Optional[str] = None  # accepted and not checked: the gateway signs no thoughts
    function_call: Optional[FunctionCallIn] = None
    function_response: Optional[FunctionResponseIn] = None
    # kinds of data the gateway does not take (a 400 names them)
    inline_data: Optional[Any] = None
    file_data: Optional[Any] = None
    executable_code: Optional[Any] = None
    code_execution_result: Optional[Any] = None


class ContentIn(GeminiModel):
    """A turn. No role: a user turn, as Google reads a single-turn request; ``function``: the old
    role of a turn of function results, read as a user turn."""

    role: Optional[Literal["user", "model", "function"]] = None
    parts: list[PartIn] = Field(min_length=1)


class SystemInstruction(GeminiModel):
    role: Optional[str] = None  # ignored: the system instruction is the system turn whatever it says
    parts: list[PartIn] = Field(min_length=1)


class FunctionDeclaration(GeminiModel):
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_.:-]*$")
    description: Optional[str] = None
    parameters: Optional[dict[str, Any]] = None  # Google's OpenAPI subset (types in capitals)
    parameters_json_schema: Optional[dict[str, Any]] = None  # a JSON schema, as it is


class ToolIn(GeminiModel):
    """A tool entry; only ``functionDeclarations`` are the client's own tools (``googleSearch``,
    ``codeExecution``, ``urlContext``, … are Google's, ignored)."""

    function_declarations: Optional[list[FunctionDeclaration]] = None


class FunctionCallingConfig(GeminiModel):
    mode: Optional[Literal["MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED"]] = None
    allowed_function_names: Optional[list[str]] = None


class ToolConfig(GeminiModel):
    function_calling_config: Optional[FunctionCallingConfig] = None


class ThinkingConfig(GeminiModel):
    include_thoughts: Optional[Bool] = None  # the thinking comes back as ``thought`` parts only if true
    thinking_budget: Optional[Int] = None  # recorded as asked, not applied
    thinking_level: Optional[str] = None  # recorded as asked, not applied


class GenerationConfig(GeminiModel):
    temperature: Optional[Float] = Field(None, ge=0, le=2)
    top_p: Optional[Float] = Field(None, gt=0, le=1)
    top_k: Optional[Float] = Field(None, ge=0)  # recorded as asked, not applied (a number: the Python SDK sends 40.0)
    candidate_count: Optional[Int] = Field(None, ge=1, le=MAX_CANDIDATES)
    max_output_tokens: Optional[Int] = Field(None, ge=1, le=MAX_TOKENS)
    stop_sequences: Optional[list[str]] = Field(None, max_length=MAX_STOP_SEQUENCES)
    seed: Optional[Int] = Field(None, ge=0, le=MAX_SEED)
    presence_penalty: Optional[Float] = None  # recorded as asked, not applied
    frequency_penalty: Optional[Float] = None  # recorded as asked, not applied
    response_logprobs: Optional[Bool] = None
    logprobs: Optional[Int] = Field(None, ge=0, le=20)
    response_mime_type: Optional[str] = None
    response_schema: Optional[dict[str, Any]] = None
    response_json_schema: Optional[dict[str, Any]] = None
    response_modalities: Optional[list[str]] = None
    thinking_config: Optional[ThinkingConfig] = None


class GenerateContentRequest(GeminiModel):
    """``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent`` (the model is
    the path's; ``model`` in the body is countTokens' ``generateContentRequest``'s)."""

    model: Optional[str] = None
    contents: list[ContentIn] = Field(min_length=1)
    system_instruction: Optional[SystemInstruction] = None
    tools: Optional[list[ToolIn]] = None
    tool_config: Optional[ToolConfig] = None
    generation_config: Optional[GenerationConfig] = None
    cached_content: Optional[str] = None  # Google's context caching: refused (the gateway keeps no caches)


class CountTokensRequest(GeminiModel):
    """``POST /v1beta/models/{model}:countTokens``: ``contents``, or a whole ``generateContentRequest``."""

    contents: Optional[list[ContentIn]] = Field(None, min_length=1)
    generate_content_request: Optional[GenerateContentRequest] = None

"""``POST /v1/chat/completions`` request models (torch-free). Unknown fields are tolerated; the
known ones have JSON's types strictly (:mod:`.types`) and OpenAI's documented ranges."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import Field

from forge_cli.engine.base import MAX_SEED
from forge_cli.gateway.protocol.types import MAX_TOKENS, Bool, ChatResponseFormat, Float, Int, LooseModel


class FunctionCall(LooseModel):
    name: str
    arguments: Union[str, dict[str, Any]] = "{}"


class ToolCallIn(LooseModel):
    id: Optional[str] = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ContentPart(LooseModel):
    type: str
    text: Optional[str] = None


class ChatMessage(LooseModel):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Union[str, list[ContentPart], None] = None
    name: Optional[str] = None
    tool_calls: Optional[list[ToolCallIn]] = None
    tool_call_id: Optional[str] = None
    reasoning_content: Optional[str] = None  # an assistant turn's thinking, sent back (vLLM's, DeepSeek's name)
    reasoning: Optional[str] = None  # the same, by OpenRouter's and newer vLLM's name


class FunctionDef(LooseModel):
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    description: Optional[str] = None
    parameters: Optional[dict[str, Any]] = None
    strict: Optional[Bool] = None


class ToolDef(LooseModel):
    type: Literal["function"] = "function"
    function: FunctionDef


class NamedFunction(LooseModel):
    name: str = Field(min_length=1)


class NamedToolChoice(LooseModel):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(LooseModel):
    include_usage: Bool = False


class ChatCompletionRequest(LooseModel):
    model: str = "forge"
    messages: list[ChatMessage] = Field(min_length=1)
    tools: Optional[list[ToolDef]] = None
    tool_choice: Union[Literal["auto", "required", "none"], NamedToolChoice, None] = None
    parallel_tool_calls: Optional[Bool] = None
    response_format: Optional[ChatResponseFormat] = None
    stop: Union[str, list[str], None] = None
    temperature: Optional[Float] = Field(None, ge=0, le=2)
    top_p: Optional[Float] = Field(None, gt=0, le=1)
    max_tokens: Optional[Int] = Field(None, ge=1, le=MAX_TOKENS)
    max_completion_tokens: Optional[Int] = Field(None, ge=1, le=MAX_TOKENS)
    n: Int = Field(1, ge=1, le=16)
    stream: Bool = False
    stream_options: Optional[StreamOptions] = None
    logprobs: Bool = False
    top_logprobs: Optional[Int] = Field(None, ge=0, le=20)
    seed: Optional[Int] = Field(None, ge=0, le=MAX_SEED)
    presence_penalty: Optional[Float] = Field(None, ge=-2, le=2)
    frequency_penalty: Optional[Float] = Field(None, ge=-2, le=2)

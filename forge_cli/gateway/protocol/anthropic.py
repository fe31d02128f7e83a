"""``POST /v1/messages`` (Anthropic) request models. Unknown fields (metadata, thinking,
context_management, cache_control, …) are tolerated; the known ones have JSON's types strictly
(:mod:`.types`) and Anthropic's documented ranges."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import Field

from forge_cli.gateway.protocol.types import MAX_TOKENS, AnthropicFormat, Bool, Float, Int, LooseModel


class Block(LooseModel):
    type: str
    text: Optional[str] = None
    id: Optional[str] = None
    name: Optional[str] = None
    input: Optional[Any] = None
    tool_use_id: Optional[str] = None
    content: Union[str, list["Block"], None] = None
    is_error: Optional[Bool] = None
    thinking: Optional[str] = None  # a thinking block's text, sent back in an assistant turn
    signature: Optional[str] = None


class Message(LooseModel):
    role: Literal["user", "assistant", "system"]
    content: Union[str, list[Block]]


class ToolDef(LooseModel):
    name: str = Field(min_length=1, max_length=128)
    description: Optional[str] = None
    input_schema: Optional[dict[str, Any]] = None
    type: Optional[str] = None  # server tools (web_search_…) have a type and no schema


class ToolChoice(LooseModel):
    type: Literal["auto", "any", "tool", "none"]
    name: Optional[str] = None
    disable_parallel_tool_use: Optional[Bool] = None


class OutputConfig(LooseModel):
    format: Optional[AnthropicFormat] = None


class CountTokensRequest(LooseModel):
    """``POST /v1/messages/count_tokens``: a Messages request without ``max_tokens``."""

    model: str = "forge"
    messages: list[Message] = Field(min_length=1)
    system: Union[str, list[Block], None] = None
    tools: Optional[list[ToolDef]] = None
    tool_choice: Optional[ToolChoice] = None
    output_config: Optional[OutputConfig] = None
    output_format: Optional[AnthropicFormat] = None  # the structured-outputs beta's spelling


class MessagesRequest(CountTokensRequest):
    max_tokens: Int = Field(ge=1, le=MAX_TOKENS)
    stop_sequences: Optional[list[str]] = None
    temperature: Optional[Float] = Field(None, ge=0, le=1)
    top_p: Optional[Float] = Field(None, gt=0, le=1)
    top_k: Optional[Int] = Field(None, ge=0)
    stream: Bool = False

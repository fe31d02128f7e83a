"""``POST /v1/messages`` (Anthropic) request models. Unknown fields (metadata, thinking,
output_config, context_management, cache_control, …) are tolerated."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class Block(_Loose):
    type: str
    text: Optional[str] = None
    id: Optional[str] = None
    name: Optional[str] = None
    input: Optional[Any] = None
    tool_use_id: Optional[str] = None
    content: Union[str, list["Block"], None] = None
    is_error: Optional[bool] = None


class Message(_Loose):
    role: Literal["user", "assistant", "system"]
    content: Union[str, list[Block]]


class ToolDef(_Loose):
    name: str = Field(min_length=1, max_length=128)
    description: Optional[str] = None
    input_schema: Optional[dict[str, Any]] = None
    type: Optional[str] = None  # server tools (web_search_…) have a type and no schema


class ToolChoice(_Loose):
    type: Literal["auto", "any", "tool", "none"]
    name: Optional[str] = None


class MessagesRequest(_Loose):
    model: str = "forge"
    messages: list[Message] = Field(min_length=1)
    system: Union[str, list[Block], None] = None
    max_tokens: int = Field(ge=1)
    tools: Optional[list[ToolDef]] = None
    tool_choice: Optional[ToolChoice] = None
    stop_sequences: Optional[list[str]] = None
    temperature: Optional[float] = Field(None, ge=0, le=1)
    top_p: Optional[float] = Field(None, gt=0, le=1)
    stream: bool = False

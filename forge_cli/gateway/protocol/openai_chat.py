"""``POST /v1/chat/completions`` request models (torch-free). Unknown fields are tolerated."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCall(_Loose):
    name: str
    arguments: Union[str, dict[str, Any]] = "{}"


class ToolCallIn(_Loose):
    id: Optional[str] = None
    type: str = "function"
    function: FunctionCall


class ContentPart(_Loose):
    type: str
    text: Optional[str] = None


class ChatMessage(_Loose):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Union[str, list[ContentPart], None] = None
    name: Optional[str] = None
    tool_calls: Optional[list[ToolCallIn]] = None
    tool_call_id: Optional[str] = None


class FunctionDef(_Loose):
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    description: Optional[str] = None
    parameters: Optional[dict[str, Any]] = None
    strict: Optional[bool] = None


class ToolDef(_Loose):
    type: str = "function"
    function: FunctionDef


class NamedToolChoice(_Loose):
    type: str = "function"
    function: dict[str, str]


class StreamOptions(_Loose):
    include_usage: bool = False


class ChatCompletionRequest(_Loose):
    model: str = "forge"
    messages: list[ChatMessage] = Field(min_length=1)
    tools: Optional[list[ToolDef]] = None
    tool_choice: Union[Literal["auto", "required", "none"], NamedToolChoice, None] = None
    stop: Union[str, list[str], None] = None
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, gt=0, le=1)
    max_tokens: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    n: int = Field(1, ge=1, le=16)
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=20)
    seed: Optional[int] = Field(None, ge=0, le=2**62)

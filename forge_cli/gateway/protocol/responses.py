"""``POST /v1/responses`` (stateless) request models. Tolerates store, include, reasoning, text,
prompt_cache_key, client_metadata, parallel_tool_calls and other fields it does not use."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class ResponsesRequest(_Loose):
    model: str = "forge"
    input: Union[str, list[dict[str, Any]]]
    instructions: Optional[str] = None
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Union[Literal["auto", "required", "none"], dict[str, Any], None] = None
    max_output_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, gt=0, le=1)
    stream: bool = False

"""``POST /v1/responses`` request models. Tolerates reasoning, prompt_cache_key, client_metadata
and other fields it does not use; the known ones have JSON's types strictly (:mod:`.types`) and
OpenAI's documented ranges. ``store`` (default true) and ``previous_response_id``: a response is
kept by its session to be continued from (see :mod:`forge_cli.gateway.routes.responses`)."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import Field

from forge_cli.gateway.protocol.types import MAX_TOKENS, Bool, Float, Int, LooseModel, ResponsesFormat


class TextConfig(LooseModel):
    format: Optional[ResponsesFormat] = None


class ResponsesRequest(LooseModel):
    model: str = "forge"
    input: Union[str, list[dict[str, Any]]]
    instructions: Optional[str] = None
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Union[Literal["auto", "required", "none"], dict[str, Any], None] = None
    parallel_tool_calls: Optional[Bool] = None
    text: Optional[TextConfig] = None
    max_output_tokens: Optional[Int] = Field(None, ge=1, le=MAX_TOKENS)
    temperature: Optional[Float] = Field(None, ge=0, le=2)
    top_p: Optional[Float] = Field(None, gt=0, le=1)
    top_logprobs: Optional[Int] = Field(None, ge=0, le=20)
    include: Optional[list[str]] = None  # "message.output_text.logprobs": the output text's token logprobs
    store: Optional[Bool] = None  # false: the response is not kept (a later previous_response_id to it is a 404)
    previous_response_id: Optional[str] = Field(None, min_length=1)  # continue from a response this session kept
    stream: Bool = False

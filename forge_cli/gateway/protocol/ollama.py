"""The Ollama API's request models (``/api/chat``, ``/api/generate``, ``/api/show``), torch-free.

Unknown fields are tolerated (Ollama itself ignores them); the known ones have JSON's types
strictly (:mod:`.types`). Sampling sits in ``options`` under Ollama's names (``num_predict`` is the
most tokens to sample); every option is recorded as asked, and those the engine does not apply
(``top_k``, penalties, mirostat, …) only so. Tools are OpenAI's function tools; a call's
``arguments`` are an object, as Ollama sends and takes them.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import Field

from forge_cli.engine.base import MAX_SEED
from forge_cli.gateway.protocol.openai_chat import ToolDef
from forge_cli.gateway.protocol.types import MAX_TOKENS, Bool, Float, Int, LooseModel

# the options that shape sampling, recorded as the request's ``asked`` sampling (Ollama's names)
SAMPLING_OPTIONS = (
    "temperature", "top_p", "top_k", "min_p", "typical_p", "tfs_z", "repeat_penalty", "repeat_last_n", "presence_penalty",
    "frequency_penalty", "penalize_newline", "mirostat", "mirostat_tau", "mirostat_eta", "seed", "num_predict", "stop",
)
ThinkLevel = Literal["low", "medium", "high"]  # gpt-oss's reasoning effort; true and false for the rest


class Options(LooseModel):
    """``options``: what the engine applies is typed here; the load-time ones (``num_ctx``,
    ``num_gpu``, …) are accepted and have no effect."""

    temperature: Optional[Float] = Field(None, ge=0)
    top_p: Optional[Float] = Field(None, gt=0, le=1)
    top_k: Optional[Int] = Field(None, ge=0)
    min_p: Optional[Float] = Field(None, ge=0, le=1)
    num_predict: Optional[Int] = Field(None, ge=1, le=MAX_TOKENS)
    stop: Union[str, list[str], None] = None
    seed: Optional[Int] = Field(None, ge=0, le=MAX_SEED)
    repeat_penalty: Optional[Float] = None
    presence_penalty: Optional[Float] = None
    frequency_penalty: Optional[Float] = None
    num_ctx: Optional[Int] = Field(None, ge=1)


class FunctionCall(LooseModel):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolCall(LooseModel):
    function: FunctionCall
    id: Optional[str] = None  # newer Ollama's call id (agno sends one); kept for the tool result that names it


class Message(LooseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: Optional[str] = None
    thinking: Optional[str] = None  # an assistant turn's thinking, sent back
    images: Optional[list[str]] = None  # refused unless empty: text only
    tool_calls: Optional[list[ToolCall]] = None
    tool_name: Optional[str] = None  # a tool result's tool
    tool_call_id: Optional[str] = None  # a tool result's call (newer Ollama)


class GenerationRequest(LooseModel):
    """What ``/api/chat`` and ``/api/generate`` share."""

    model: str = Field(min_length=1)
    stream: Bool = True  # Ollama streams unless told not to
    think: Union[Bool, ThinkLevel, None] = None
    format: Union[Literal["", "json"], dict[str, Any], None] = None
    options: Optional[Options] = None
    keep_alive: Union[Float, str, None] = None  # accepted; the model stays loaded
    logprobs: Bool = False
    top_logprobs: Optional[Int] = Field(None, ge=0, le=20)


class ChatRequest(GenerationRequest):
    messages: list[Message] = Field(min_length=1)
    tools: Optional[list[ToolDef]] = None


class GenerateRequest(GenerationRequest):
    prompt: str
    system: Optional[str] = None
    raw: Bool = False
    suffix: Optional[str] = None  # refused unless empty: no fill-in-the-middle
    template: Optional[str] = None  # refused unless empty: the model's own template renders
    context: Optional[list[Int]] = None  # refused unless empty: this gateway returns none to continue from
    images: Optional[list[str]] = None  # refused unless empty: text only


class ShowRequest(LooseModel):
    model: Optional[str] = Field(None, min_length=1)
    name: Optional[str] = Field(None, min_length=1)  # the field's older name
    verbose: Optional[Bool] = None

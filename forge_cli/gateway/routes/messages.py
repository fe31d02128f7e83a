"""``POST /v1/messages`` (Anthropic Messages, stream and not; ``?beta=true`` accepted).

The body is the anthropic SDK's ``Message`` and every stream event its own type
(``RawMessageStartEvent``, ``RawContentBlockDeltaEvent``, …), dumped as the SDK dumps them;
``usage`` is one :class:`Usage`, in the body and in ``message_start`` (:func:`_usage`).
"""

from __future__ import annotations

import json
import secrets
from typing import Any, AsyncIterator

from anthropic.types import (InputJSONDelta, Message, MessageDeltaUsage, MessageTokensCount, RawContentBlockDeltaEvent,
                             RawContentBlockStartEvent, RawContentBlockStopEvent, RawMessageDeltaEvent, RawMessageStartEvent,
                             RawMessageStopEvent, SignatureDelta, TextBlock, TextDelta, ThinkingBlock, ThinkingDelta,
                             ToolUseBlock, Usage)
from anthropic.types.raw_message_delta_event import Delta
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from forge_cli.gateway.errors import APIError
from forge_cli.gateway.openapi import body_schema
from forge_cli.gateway.protocol.anthropic import Block, CountTokensRequest, MessagesRequest
from forge_cli.gateway.protocol.types import output_format
from forge_cli.gateway.render import Tool, Turn, arguments_object, render_prompt
from forge_cli.gateway.routes.common import (counting_format, check_conversation, commit, generate, prepare, read_json, sampling, sse_event,
                                             state_of, stream, validate, wire_json)
from forge_cli.specs import ToolCall

router = APIRouter()


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for j, block in enumerate(content):
        if block.type == "text":
            parts.append(block.text or "")
        elif block.type in ("thinking", "redacted_thinking"):
            continue  # earlier reasoning is not re-rendered
        else:
            raise APIError(400, f"{where}[{j}]: content block type {block.type!r} is not supported here", param=where)
    return "\n".join(parts) if len(parts) > 1 and all(parts) else "".join(parts)


def to_turns(req: CountTokensRequest) -> list[Turn]:
    turns: list[Turn] = []
    if req.system:
        turns.append(Turn("system", _text(req.system, "system")))
    names: dict[str, str] = {}  # tool_use id -> tool name: a tool result names its tool for the template
    for i, m in enumerate(req.messages):
        where = f"messages[{i}].content"
        if isinstance(m.content, str):
            turns.append(Turn(m.role, m.content))
            continue
        if m.role == "assistant":
            text, calls, thinking = [], [], []
            for j, b in enumerate(m.content):
                if b.type == "text":
                    text.append(b.text or "")
                elif b.type == "tool_use":
                    if not b.name:
                        raise APIError(400, f"{where}[{j}]: tool_use needs a name", param=where)
                    calls.append(ToolCall(name=b.name, arguments=b.input if isinstance(b.input, (dict, str)) else {}, id=b.id))
                    if b.id:
                        names[b.id] = b.name
                elif b.type == "thinking":
                    thinking.append(b.thinking or "")  # rendered as the template renders thinking
                elif b.type != "redacted_thinking":
                    raise APIError(400, f"{where}[{j}]: content block type {b.type!r} is not supported in assistant turns", param=where)
            turns.append(Turn("assistant", "".join(text), calls, reasoning="".join(thinking)))
            continue
        # user (or system) turns: tool results first (they answer the previous turn), then text
        text_blocks: list[Block] = []
        for j, b in enumerate(m.content):
            if b.type == "tool_result":
                result = _text(b.content, f"{where}[{j}].content")
                turns.append(Turn("tool", f"[error] {result}" if b.is_error else result, name=names.get(b.tool_use_id or ""),
                                  tool_call_id=b.tool_use_id))
            else:
                text_blocks.append(b)
        if text_blocks:
            turns.append(Turn(m.role, _text(text_blocks, where)))
    return turns


def to_tools(req: CountTokensRequest) -> list[Tool]:
    tools = []
    for t in req.tools or []:
        if t.input_schema is None and t.type and t.type != "custom":
            continue  # server tools (web search, …) are the provider's: ignored
        tools.append(Tool(t.name, t.description or "", t.input_schema or {"type": "object", "properties": {}}))
    return tools


def _blocks(parsed: Any) -> list[ThinkingBlock | TextBlock | ToolUseBlock]:
    """The answer's content: its thinking (when the reasoning parser split some off; no signature:
    it is sent back as it came), its text (an empty answer is one empty text block), then one block
    per tool call, whose ``input`` is an object (arguments that are not one are ``{"input": …}``)."""
    blocks: list[ThinkingBlock | TextBlock | ToolUseBlock] = []
    if parsed.reasoning:
        blocks.append(ThinkingBlock(type="thinking", thinking=parsed.reasoning, signature=""))
    if parsed.content or not parsed.calls:
        blocks.append(TextBlock(type="text", text=parsed.content))
    for call in parsed.calls:
        blocks.append(ToolUseBlock(type="tool_use", id=call.id or f"toolu_{secrets.token_hex(12)}", name=call.name,
                                   input=arguments_object(call)))
    return blocks


def _usage(n_prompt: int, n_output: int) -> Usage:
    """A message's ``usage`` (the body's, and ``message_start``'s with no output yet): no prompt caching."""
    return Usage(input_tokens=n_prompt, output_tokens=n_output, cache_creation_input_tokens=0, cache_read_input_tokens=0)


def _stop(out: Any, parsed: Any) -> tuple[str, str | None]:
    if parsed.calls:
        return "tool_use", None
    if out.finish_reason == "length":
        return "max_tokens", None
    if isinstance(out.stop_reason, str):
        return "stop_sequence", out.stop_reason
    return "end_turn", None


def _tool_choice(req: CountTokensRequest, tools: list[Tool]) -> tuple[str | None, str | None]:
    """Anthropic's tool_choice as (choice, forced tool name)."""
    if req.tool_choice is None:
        return None, None
    choice = {"auto": "auto", "any": "required", "none": "none", "tool": None}[req.tool_choice.type]
    forced = req.tool_choice.name if req.tool_choice.type == "tool" else None
    if req.tool_choice.type == "tool" and forced not in {t.name for t in tools}:
        raise APIError(400, f"tool_choice.name: {forced!r} is not in tools", param="tool_choice")
    return choice, forced


def _output_format(req: CountTokensRequest) -> dict[str, Any] | None:
    fmt = (req.output_config.format if req.output_config is not None else None) or req.output_format
    return None if fmt is None else output_format("json_schema", schema=fmt.schema_)


@router.post("/v1/messages", openapi_extra=body_schema(MessagesRequest))
@router.post("/s/{session}/v1/messages", openapi_extra=body_schema(MessagesRequest))
async def messages(request: Request):
    raw = await read_json(request)
    req: MessagesRequest = validate(MessagesRequest, raw)
    tools = to_tools(req)
    choice, forced = _tool_choice(req, tools)
    params = sampling(max_tokens=req.max_tokens, temperature=req.temperature, top_p=req.top_p, stop=req.stop_sequences, seed=None)
    kw: dict[str, Any] = {"tool_choice": choice, "forced_tool": forced, "raw": raw, "output_format": _output_format(req)}
    if req.stream:
        prepared = await prepare(request, to_turns(req), tools, params, **kw)
        return StreamingResponse(_live(request, prepared, req.model), media_type="text/event-stream")
    gen = await generate(request, to_turns(req), tools, params, **kw)
    out, parsed = gen.outputs[0], gen.parsed[0]
    stop_reason, stop_sequence = _stop(out, parsed)
    body = Message(id=f"msg_{secrets.token_hex(12)}", type="message", role="assistant", model=req.model, content=_blocks(parsed),
                   stop_reason=stop_reason, stop_sequence=stop_sequence, usage=_usage(len(gen.prompt_ids), len(out.output_ids)))
    response = JSONResponse(wire_json(body))
    await commit(request, gen)
    return response


def _event(event: Any) -> str:
    return sse_event(event, event.type)


async def _live(request: Request, prepared: Any, model: str) -> AsyncIterator[str]:
    """Anthropic's event sequence, text streamed as the engine samples it, tool_use blocks at the end."""
    start = Message(id=f"msg_{secrets.token_hex(12)}", type="message", role="assistant", model=model, content=[], stop_reason=None,
                    stop_sequence=None, usage=_usage(len(prepared.rendered.prompt_ids), 0))
    yield _event(RawMessageStartEvent(type="message_start", message=start))
    index, open_kind, gen = 0, None, None  # the block being streamed: "thinking", "text" or None

    def start(kind: str) -> Any:
        block = ThinkingBlock(type="thinking", thinking="", signature="") if kind == "thinking" else TextBlock(type="text", text="")
        return _event(RawContentBlockStartEvent(type="content_block_start", index=index, content_block=block))

    def stop() -> Any:
        return _event(RawContentBlockStopEvent(type="content_block_stop", index=index))

    async for kind, value in stream(request, prepared):
        if kind == "done":
            gen = value
            continue
        want = "thinking" if kind == "reasoning" else "text"
        if open_kind != want:
            if want == "thinking" and open_kind == "text":
                continue  # thinking that comes after the text began (a parser's final trim): a block cannot reopen
            if open_kind is not None:
                yield stop()
                index += 1
            yield start(want)
            open_kind = want
        delta = ThinkingDelta(type="thinking_delta", thinking=value) if want == "thinking" else TextDelta(type="text_delta", text=value)
        yield _event(RawContentBlockDeltaEvent(type="content_block_delta", index=index, delta=delta))
    out, parsed = gen.outputs[0], gen.parsed[0]
    if open_kind == "thinking":
        yield _event(RawContentBlockDeltaEvent(type="content_block_delta", index=index,
                                               delta=SignatureDelta(type="signature_delta", signature="")))
        yield stop()
        index += 1
        open_kind = None
    if open_kind is None and not parsed.calls:
        yield start("text")  # an empty answer is still one (empty) text block
        open_kind = "text"
    if open_kind == "text":
        yield stop()
        index += 1
    for block in _blocks(parsed):
        if not isinstance(block, ToolUseBlock):
            continue
        head = ToolUseBlock(type="tool_use", id=block.id, name=block.name, input={})
        yield _event(RawContentBlockStartEvent(type="content_block_start", index=index, content_block=head))
        text = json.dumps(block.input, ensure_ascii=False)
        for i in range(0, len(text), 24):
            delta = InputJSONDelta(type="input_json_delta", partial_json=text[i : i + 24])
            yield _event(RawContentBlockDeltaEvent(type="content_block_delta", index=index, delta=delta))
        yield _event(RawContentBlockStopEvent(type="content_block_stop", index=index))
        index += 1
    stop_reason, stop_sequence = _stop(out, parsed)
    yield _event(RawMessageDeltaEvent(type="message_delta", delta=Delta(stop_reason=stop_reason, stop_sequence=stop_sequence),
                                      usage=MessageDeltaUsage(output_tokens=len(out.output_ids))))
    yield _event(RawMessageStopEvent(type="message_stop"))


@router.post("/v1/messages/count_tokens", openapi_extra=body_schema(CountTokensRequest))
@router.post("/s/{session}/v1/messages/count_tokens", openapi_extra=body_schema(CountTokensRequest))
async def count_tokens(request: Request):
    """The prompt's length as the gateway would render it (the model's chat template, the tools in the
    session's format). Counting opens no trajectory: a key seen for the first time uses the defaults.
    A prompt that certainly cannot fit the model's context is refused (400), as a call would be."""
    req: CountTokensRequest = validate(CountTokensRequest, await read_json(request))
    state = state_of(request)
    fmt = await counting_format(request)
    tools = to_tools(req)
    choice, forced = _tool_choice(req, tools)
    turns = to_turns(req)
    check_conversation(turns)
    rendered = await run_in_threadpool(lambda: render_prompt(state.tokenizer, turns, tools, fmt, tool_choice=choice, forced_tool=forced,
                                                             max_len=state.engine.max_model_len))
    return wire_json(MessageTokensCount(input_tokens=len(rendered.prompt_ids)))

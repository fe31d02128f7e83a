"""``POST /v1/chat/completions`` (stream and not; tools, tool_choice, n, logprobs, usage).

Every body and chunk is the openai SDK's own type (``ChatCompletion``, ``ChatCompletionChunk``),
dumped as the SDK dumps it (:func:`~forge_cli.gateway.routes.common.wire_json`); ``usage`` is one
:class:`CompletionUsage`, streamed or not (:func:`~forge_cli.gateway.routes.common.openai_usage`).
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any, AsyncIterator, Iterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionTokenLogprob,
    chat_completion,
    chat_completion_chunk,
)
from openai.types.chat.chat_completion_message_function_tool_call import Function
from openai.types.chat.chat_completion_token_logprob import TopLogprob
from openai.types.completion_usage import CompletionUsage

from forge_cli.gateway.errors import APIError, sse
from forge_cli.gateway.openapi import body_schema
from forge_cli.gateway.protocol.openai_chat import ChatCompletionRequest, ChatMessage, NamedToolChoice
from forge_cli.gateway.protocol.types import output_format
from forge_cli.gateway.render import Tool, Turn, arguments_json
from forge_cli.gateway.routes.common import (
    Generated,
    commit,
    finish_reason,
    generate,
    openai_usage,
    prepare,
    read_json,
    sampling,
    sse_event,
    stream,
    validate,
    wire_json,
)
from forge_cli.gateway.token_text import logprob_entries
from forge_cli.specs import ToolCall

router = APIRouter()


def content_text(message: ChatMessage, index: int) -> str:
    """A message's content as text: a string, or the text parts of a part list."""
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    texts = []
    for j, part in enumerate(message.content):
        if part.type in ("text", "input_text", "output_text") and part.text is not None:
            texts.append(part.text)
        else:
            raise APIError(400, f"messages[{index}].content[{j}]: content part type {part.type!r} is not supported (text only)",
                           param=f"messages[{index}].content")
    return "".join(texts)


def to_turns(messages: list[ChatMessage]) -> list[Turn]:
    turns = []
    for i, m in enumerate(messages):
        role = {"developer": "system", "function": "tool"}.get(m.role, m.role)
        calls = []
        for tc in m.tool_calls or []:
            args: Any = tc.function.arguments
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except ValueError:
                    pass  # keep a freeform string as it is
            calls.append(ToolCall(name=tc.function.name, arguments=args, id=tc.id))
        if calls and role != "assistant":
            raise APIError(400, f"messages[{i}]: only assistant messages carry tool_calls", param=f"messages[{i}]")
        turns.append(Turn(role=role, content=content_text(m, i), tool_calls=calls, name=m.name, tool_call_id=m.tool_call_id,
                          reasoning=(m.reasoning_content or m.reasoning or "") if role == "assistant" else ""))
    return turns


def _message(parsed: Any) -> ChatCompletionMessage:
    """The assistant message; its thinking as ``reasoning_content`` (vLLM's and DeepSeek's field, an
    extra the SDK keeps) when the model's reasoning parser split some off."""
    content = parsed.content if (parsed.content or not parsed.calls) else None
    extra: dict[str, Any] = {"reasoning_content": parsed.reasoning} if parsed.reasoning else {}
    if not parsed.calls:
        return ChatCompletionMessage(role="assistant", content=content, **extra)
    calls = [ChatCompletionMessageFunctionToolCall(id=call_id(c), type="function",
                                                   function=Function(name=c.name, arguments=arguments_json(c)))
             for c in parsed.calls]
    return ChatCompletionMessage(role="assistant", content=content, tool_calls=calls, **extra)


def call_id(call: ToolCall) -> str:
    """The call's id: the model's own where its syntax carries one (Mistral's, which its template
    checks when the call comes back), else a new one."""
    return call.id or f"call_{secrets.token_hex(8)}"


def _logprobs(state: Any, output: Any) -> list[ChatCompletionTokenLogprob]:
    """Each output token's logprob entry (with its ``top_logprobs``), as both ``logprobs.content`` types hold them."""
    return [ChatCompletionTokenLogprob(**token, top_logprobs=[TopLogprob(**top) for top in tops])
            for token, tops in logprob_entries(state.tokenizer, output)]


def _output_format(req: ChatCompletionRequest) -> dict[str, Any] | None:
    fmt = req.response_format
    if fmt is None:
        return None
    if fmt.type == "json_schema":
        if fmt.json_schema is None:
            raise APIError(400, "response_format.json_schema: is required when type is 'json_schema'", param="response_format")
        spec = fmt.json_schema
        return output_format("json_schema", name=spec.name, schema=spec.schema_, strict=spec.strict)
    return output_format(fmt.type)


@router.post("/v1/chat/completions", openapi_extra=body_schema(ChatCompletionRequest))
@router.post("/s/{session}/v1/chat/completions", openapi_extra=body_schema(ChatCompletionRequest))
async def chat_completions(request: Request):
    raw = await read_json(request)
    req: ChatCompletionRequest = validate(ChatCompletionRequest, raw)
    tools = [Tool(t.function.name, t.function.description or "", t.function.parameters or {"type": "object", "properties": {}})
             for t in (req.tools or [])]
    choice = req.tool_choice if isinstance(req.tool_choice, str) else None
    forced = req.tool_choice.function.name if isinstance(req.tool_choice, NamedToolChoice) else None
    if forced is not None and forced not in {t.name for t in tools}:
        raise APIError(400, f"tool_choice: names the tool {forced!r}, which is not in tools", param="tool_choice")
    if choice in ("required",) and not tools:
        raise APIError(400, "tool_choice: 'required' needs tools", param="tool_choice")
    if req.top_logprobs and not req.logprobs:
        raise APIError(400, "top_logprobs: needs logprobs = true", param="top_logprobs")
    params = sampling(max_tokens=req.max_completion_tokens or req.max_tokens, temperature=req.temperature, top_p=req.top_p,
                      stop=req.stop, seed=req.seed, n=req.n, top_logprobs=req.top_logprobs if req.logprobs else None)
    state = request.app.state.gateway
    cid = f"chatcmpl-{secrets.token_hex(12)}"
    created = int(time.time())
    turns = to_turns(req.messages)
    kw: dict[str, Any] = {"tool_choice": choice, "forced_tool": forced, "raw": raw, "output_format": _output_format(req)}
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    if req.stream and req.n == 1:  # content streams while the engine samples
        prepared = await prepare(request, turns, tools, params, **kw)
        return StreamingResponse(_live(state, request, prepared, cid, created, req, include_usage), media_type="text/event-stream")
    gen = await generate(request, turns, tools, params, **kw)
    if req.stream:
        chunks = list(_stream(state, gen, cid, created, req, include_usage))  # made before recording
        await commit(request, gen)
        return StreamingResponse(iter(chunks), media_type="text/event-stream")
    choices = [
        chat_completion.Choice(index=i, message=_message(p), finish_reason=finish_reason(o, p),
                               logprobs=chat_completion.ChoiceLogprobs(content=_logprobs(state, o)) if req.logprobs else None)
        for i, (o, p) in enumerate(zip(gen.outputs, gen.parsed))
    ]
    body = ChatCompletion(id=cid, object="chat.completion", created=created, model=req.model, choices=choices,
                          usage=openai_usage(gen), system_fingerprint=f"forge-v{gen.outputs[0].policy_version}")
    response = JSONResponse(wire_json(body))
    await commit(request, gen)
    return response


def _chunker(cid: str, created: int, req: ChatCompletionRequest, include_usage: bool):
    """``chunk(index, delta, finish, logprobs)``: one choice's chunk as an SSE line; ``usage(u)``: the last chunk."""

    def chunk(index: int, delta: chat_completion_chunk.ChoiceDelta, finish: str | None = None,
              logprobs: list[ChatCompletionTokenLogprob] | None = None) -> str:
        choice = chat_completion_chunk.Choice(
            index=index, delta=delta, finish_reason=finish,
            logprobs=None if logprobs is None else chat_completion_chunk.ChoiceLogprobs(content=logprobs))
        extra: dict[str, Any] = {"usage": None} if include_usage else {}
        return sse_event(ChatCompletionChunk(id=cid, object="chat.completion.chunk", created=created, model=req.model,
                                             choices=[choice], **extra))

    def usage(value: CompletionUsage) -> str:
        return sse_event(ChatCompletionChunk(id=cid, object="chat.completion.chunk", created=created, model=req.model, choices=[],
                                             usage=value))

    return chunk, usage


def _delta(**fields: Any) -> chat_completion_chunk.ChoiceDelta:
    return chat_completion_chunk.ChoiceDelta(**fields)


def _tool_call_chunks(chunk: Any, index: int, calls: list[ToolCall]) -> list[str]:
    Call, CallFunction = chat_completion_chunk.ChoiceDeltaToolCall, chat_completion_chunk.ChoiceDeltaToolCallFunction
    out = []
    for k, call in enumerate(calls):
        head = Call(index=k, id=call_id(call), type="function", function=CallFunction(name=call.name, arguments=""))
        out.append(chunk(index, _delta(tool_calls=[head])))
        for piece in _pieces(arguments_json(call), 24):
            out.append(chunk(index, _delta(tool_calls=[Call(index=k, function=CallFunction(arguments=piece))])))
    return out


async def _live(state: Any, request: Request, prepared: Any, cid: str, created: int, req: ChatCompletionRequest,
                include_usage: bool) -> AsyncIterator[str]:
    """One sample streamed as the engine makes it: content as it is safe, tool calls at the end."""
    chunk, usage = _chunker(cid, created, req, include_usage)
    yield chunk(0, _delta(role="assistant", content=""))
    gen = None
    async for kind, value in stream(request, prepared):
        if kind == "text":
            yield chunk(0, _delta(content=value))
        elif kind == "reasoning":
            yield chunk(0, _delta(reasoning_content=value))
        else:
            gen = value
    out, parsed = gen.outputs[0], gen.parsed[0]
    for line in _tool_call_chunks(chunk, 0, parsed.calls):
        yield line
    yield chunk(0, _delta(), finish_reason(out, parsed), _logprobs(state, out) if req.logprobs else None)
    if include_usage:
        yield usage(openai_usage(gen))
    yield sse("[DONE]")


def _stream(state: Any, gen: Generated, cid: str, created: int, req: ChatCompletionRequest, include_usage: bool) -> Iterator[str]:
    """n > 1: the finished samples as OpenAI chunks: role, content, tool-call deltas, finish, usage, [DONE]."""
    chunk, usage = _chunker(cid, created, req, include_usage)

    for i, (out, parsed) in enumerate(zip(gen.outputs, gen.parsed)):
        yield chunk(i, _delta(role="assistant", content=""))
        if parsed.reasoning:
            for piece in _pieces(parsed.reasoning):
                yield chunk(i, _delta(reasoning_content=piece))
        if parsed.content:
            for piece in _pieces(parsed.content):
                yield chunk(i, _delta(content=piece))
        for line in _tool_call_chunks(chunk, i, parsed.calls):
            yield line
        yield chunk(i, _delta(), finish_reason(out, parsed), _logprobs(state, out) if req.logprobs else None)
    if include_usage:
        yield usage(openai_usage(gen))
    yield sse("[DONE]")


def _pieces(text: str, size: int = 16) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]

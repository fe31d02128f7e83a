"""The Ollama API (``/api/…``): ``POST /api/chat`` and ``POST /api/generate`` (an NDJSON stream, as
Ollama answers unless told ``stream: false``), ``GET /api/tags``, ``POST /api/show``,
``GET /api/version`` and ``GET /api/ps``; each also under ``/s/<session>``.

Every body and stream line is the ollama client's own type (``ChatResponse``, ``GenerateResponse``,
``ListResponse``, ``ShowResponse``, ``ProcessResponse``), dumped with the fields the gateway set, as
Ollama's server writes them (:func:`ollama_json`): ``created_at`` in RFC 3339 with nanoseconds, the
last line ``done: true`` with ``done_reason`` (``stop`` or ``length``; ``stop`` after tool calls, as
Ollama says), the token counts and the durations in nanoseconds (:func:`_counts`). Tool calls come
whole in the last line before it; ``arguments`` are an object.

The model thinks as its template makes it: the thinking its reasoning parser splits off is the
message's ``thinking`` (``response``'s, for ``/api/generate``) unless the request says
``think: false``, which leaves it out of the answer (it is recorded all the same). ``/api/generate``
returns no ``context`` (Forge keeps none to continue from), and refuses ``suffix``, ``template``,
``images`` and a ``context`` that is not empty.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timezone
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ollama._types import (ChatResponse, GenerateResponse, ListResponse, Logprob, Message, ModelDetails, ProcessResponse,
                           ShowResponse, TokenLogprob)
from pydantic import BaseModel

from forge_cli.engine.base import SamplingParams
from forge_cli.errors import ForgeError
from forge_cli.gateway.errors import APIError
from forge_cli.gateway.openapi import body_schema
from forge_cli.gateway.protocol.ollama import SAMPLING_OPTIONS, ChatRequest, GenerateRequest, GenerationRequest, Options, ShowRequest
from forge_cli.gateway.protocol.ollama import Message as MessageIn
from forge_cli.gateway.protocol.types import MAX_TOKENS, output_format
from forge_cli.gateway.render import Tool, Turn, arguments_object
from forge_cli.gateway.routes.common import Generated, Prepared, commit, generate, prepare, read_json, sampling, state_of, stream, validate
from forge_cli.gateway.token_text import logprob_entries
from forge_cli.specs import ParsedOutput, ToolCall

router = APIRouter()

API_VERSION = "0.12.6"  # the Ollama release whose API this follows (think, tool_name, logprobs)
NDJSON = "application/x-ndjson"


def ollama_json(model: BaseModel) -> dict[str, Any]:
    """A body or stream line built as the ollama client's type, as the server sends it: JSON types,
    the wire names (``model_info``), only the fields set."""
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _line(model: BaseModel) -> str:
    return json.dumps(ollama_json(model), ensure_ascii=False, separators=(",", ":")) + "\n"


def created_at(ns: int | None = None) -> str:
    """A time as Ollama's server writes it (Go's RFC 3339 with nanoseconds, trailing zeros dropped), in UTC."""
    ns = time.time_ns() if ns is None else ns
    seconds, fraction = divmod(ns, 1_000_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    digits = f"{fraction:09d}".rstrip("0")
    return f"{stamp}.{digits}Z" if digits else f"{stamp}Z"


# ---- the request ------------------------------------------------------------------------------------


def to_turns(messages: list[MessageIn]) -> list[Turn]:
    """The messages as turns. A tool result answers a call of the assistant message before it: the
    one its ``tool_call_id`` names, else the first with its ``tool_name``, else the next one; it takes
    that call's name and id (``call_<k>`` where the call had none, as the chat template gets it)."""
    turns: list[Turn] = []
    waiting: list[tuple[str, str]] = []  # (id, name) of the last assistant message's calls not yet answered
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if m.images:
            raise APIError(400, f"{where}.images: images are not supported (text only)", param=f"{where}.images")
        if m.tool_calls and m.role != "assistant":
            raise APIError(400, f"{where}: only assistant messages carry tool_calls", param=f"{where}.tool_calls")
        content = m.content or ""
        if m.role == "assistant":
            calls = [ToolCall(name=c.function.name, arguments=c.function.arguments, id=c.id) for c in m.tool_calls or []]
            waiting = [(c.id or f"call_{k}", c.name) for k, c in enumerate(calls)]
            turns.append(Turn("assistant", content, calls, reasoning=m.thinking or ""))
        elif m.role == "tool":
            call_id, name = _answered(waiting, m, where)
            turns.append(Turn("tool", content, name=m.tool_name or name, tool_call_id=call_id))
        else:
            if m.role == "user":
                waiting = []
            turns.append(Turn(m.role, content))
    return turns


def _answered(waiting: list[tuple[str, str]], m: MessageIn, where: str) -> tuple[str, str]:
    if not waiting:
        raise APIError(400, f"{where}: a tool message must answer a tool call of the assistant message before it "
                            f"(one tool message per call); there is no call left to answer", param=where)
    by_id = [w for w in waiting if m.tool_call_id is not None and w[0] == m.tool_call_id]
    by_name = [w for w in waiting if m.tool_name is not None and w[1] == m.tool_name]
    match = (by_id or by_name or waiting)[0]
    waiting.remove(match)
    return match


def _tools(req: ChatRequest) -> list[Tool]:
    return [Tool(t.function.name, t.function.description or "", t.function.parameters or {"type": "object", "properties": {}})
            for t in req.tools or []]


def _output_format(req: GenerationRequest) -> dict[str, Any] | None:
    """``format``: ``"json"`` is a JSON object, an object a JSON schema (recorded as asked)."""
    if not req.format:
        return None
    if req.format == "json":
        return output_format("json_object")
    return output_format("json_schema", schema=req.format)


def _sampling(req: GenerationRequest, raw: dict[str, Any]) -> tuple[SamplingParams, dict[str, Any]]:
    """The engine's params from ``options`` and what was asked (the sampling options as sent). With
    no ``num_predict`` the answer may fill the context, as Ollama's default (no limit) does."""
    options, sent = req.options or Options(), raw.get("options") or {}
    if not all([options.stop] if isinstance(options.stop, str) else options.stop or []):
        raise APIError(400, "options.stop: stop sequences must not be empty", param="options.stop")
    params = sampling(max_tokens=options.num_predict or MAX_TOKENS, temperature=options.temperature, top_p=options.top_p,
                      stop=options.stop, seed=options.seed, top_logprobs=req.top_logprobs if req.logprobs else None)
    return params, {k: sent[k] for k in SAMPLING_OPTIONS if sent.get(k) is not None}


def _check_logprobs(req: GenerationRequest) -> None:
    if req.top_logprobs and not req.logprobs:
        raise APIError(400, "top_logprobs: needs logprobs = true", param="top_logprobs")


# ---- the answer -------------------------------------------------------------------------------------


class Clock:
    """When a call arrived and when its request was checked (ns); generation's start is ``Generated.started``."""

    def __init__(self) -> None:
        self.arrived = time.time_ns()
        self.checked = self.arrived

    def check(self) -> None:
        self.checked = time.time_ns()


def _counts(gen: Generated, clock: Clock) -> dict[str, Any]:
    """The last line's counts and durations (ns): ``load_duration`` reading and checking the request,
    ``prompt_eval_duration`` rendering and tokenising the prompt, ``eval_duration`` the engine's
    whole generation (prefill included: the engine does not time it apart)."""
    started, now = int(gen.started * 1e9), time.time_ns()
    return {"total_duration": now - clock.arrived, "load_duration": clock.checked - clock.arrived,
            "prompt_eval_count": len(gen.prompt_ids), "prompt_eval_duration": max(started - clock.checked, 0),
            "eval_count": len(gen.outputs[0].output_ids), "eval_duration": max(now - started, 0)}


def _done_reason(gen: Generated) -> str:
    return "length" if gen.outputs[0].finish_reason == "length" else "stop"


def _calls(parsed: ParsedOutput) -> list[Message.ToolCall]:
    return [Message.ToolCall(function=Message.ToolCall.Function(name=c.name, arguments=arguments_object(c))) for c in parsed.calls]


def _message(parsed: ParsedOutput, think: Any) -> Message:
    fields: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.reasoning and think is not False:
        fields["thinking"] = parsed.reasoning
    if parsed.calls:
        fields["tool_calls"] = _calls(parsed)
    return Message(**fields)


def _logprobs(request: Request, gen: Generated) -> list[Logprob]:
    """Each output token's logprob (the recorded one) with its ``top_logprobs`` alternatives."""
    entries = logprob_entries(state_of(request).tokenizer, gen.outputs[0])
    return [Logprob(token=token["token"], logprob=token["logprob"],
                    top_logprobs=[TokenLogprob(token=t["token"], logprob=t["logprob"]) for t in tops])
            for token, tops in entries]


def _last(request: Request, gen: Generated, clock: Clock, req: GenerationRequest) -> dict[str, Any]:
    """What the last line (or the whole body) carries besides the answer itself."""
    fields: dict[str, Any] = {"done": True, "done_reason": _done_reason(gen), **_counts(gen, clock)}
    if req.logprobs:
        fields["logprobs"] = _logprobs(request, gen)
    return fields


async def _live(request: Request, prepared: Prepared, clock: Clock, req: GenerationRequest, kind: str) -> AsyncIterator[str]:
    """The answer as NDJSON lines while the engine samples: thinking and text pieces, then (chat) the
    tool calls, then the last line. An engine that fails mid-stream ends it with ``{"error": …}``, as Ollama does."""

    def piece(text: str = "", thinking: str | None = None, **fields: Any) -> str:
        if kind == "chat":
            message = Message(role="assistant", content=text, **({} if thinking is None else {"thinking": thinking}))
            return _line(ChatResponse(model=req.model, created_at=created_at(), message=message, **fields))
        extra = {} if thinking is None else {"thinking": thinking}
        return _line(GenerateResponse(model=req.model, created_at=created_at(), response=text, **extra, **fields))

    gen: Generated | None = None
    try:
        async for event, value in stream(request, prepared):
            if event == "text":
                yield piece(value, done=False)
            elif event == "reasoning":
                if req.think is not False:
                    yield piece("", value, done=False)
            else:
                gen = value
    except (APIError, ForgeError) as exc:
        yield json.dumps({"error": str(exc)}, ensure_ascii=False) + "\n"
        return
    assert gen is not None
    parsed = gen.parsed[0]
    if kind == "chat" and parsed.calls:
        message = Message(role="assistant", content="", tool_calls=_calls(parsed))
        yield _line(ChatResponse(model=req.model, created_at=created_at(), message=message, done=False))
    yield piece("", **_last(request, gen, clock, req))


# ---- the endpoints ----------------------------------------------------------------------------------


@router.post("/api/chat", openapi_extra=body_schema(ChatRequest))
@router.post("/s/{session}/api/chat", openapi_extra=body_schema(ChatRequest))
async def chat(request: Request):
    clock = Clock()
    raw = await read_json(request)
    req: ChatRequest = validate(ChatRequest, raw)
    _check_logprobs(req)
    turns, tools = to_turns(req.messages), _tools(req)
    params, asked = _sampling(req, raw)
    kw: dict[str, Any] = {"raw": raw, "output_format": _output_format(req), "asked": asked}
    clock.check()
    if req.stream:
        prepared = await prepare(request, turns, tools, params, **kw)
        return StreamingResponse(_live(request, prepared, clock, req, "chat"), media_type=NDJSON)
    gen = await generate(request, turns, tools, params, **kw)
    body = ChatResponse(model=req.model, created_at=created_at(), message=_message(gen.parsed[0], req.think),
                        **_last(request, gen, clock, req))
    response = JSONResponse(ollama_json(body))
    await commit(request, gen)
    return response


@router.post("/api/generate", openapi_extra=body_schema(GenerateRequest))
@router.post("/s/{session}/api/generate", openapi_extra=body_schema(GenerateRequest))
async def generate_text(request: Request):
    """A prompt in the model's chat template (one user turn, after ``system``), or with ``raw`` as it is."""
    clock = Clock()
    raw = await read_json(request)
    req: GenerateRequest = validate(GenerateRequest, raw)
    _check_logprobs(req)
    for name in ("suffix", "template", "context", "images"):
        if getattr(req, name):
            why = {"suffix": "no fill-in-the-middle", "template": "the model's own chat template renders the prompt",
                   "context": "this gateway returns no context to continue from: send the whole prompt",
                   "images": "text only"}[name]
            raise APIError(400, f"{name}: not supported ({why})", param=name)
    if not req.prompt:
        raise APIError(400, "prompt: is empty (Ollama loads the model on an empty prompt; here there is nothing to load)",
                       param="prompt")
    if req.raw and req.system:
        raise APIError(400, "system: cannot be used with raw = true (a raw prompt is sent exactly as it is)", param="system")
    params, asked = _sampling(req, raw)
    kw: dict[str, Any] = {"raw": raw, "output_format": _output_format(req), "asked": asked}
    if req.raw:
        kw["prompt"] = req.prompt
    turns = [] if req.raw else [*([Turn("system", req.system)] if req.system else []), Turn("user", req.prompt)]
    clock.check()
    if req.stream:
        prepared = await prepare(request, turns, [], params, **kw)
        return StreamingResponse(_live(request, prepared, clock, req, "generate"), media_type=NDJSON)
    gen = await generate(request, turns, [], params, **kw)
    parsed = gen.parsed[0]
    extra = {"thinking": parsed.reasoning} if parsed.reasoning and req.think is not False else {}
    body = GenerateResponse(model=req.model, created_at=created_at(), response=parsed.content, **extra,
                            **_last(request, gen, clock, req))
    response = JSONResponse(ollama_json(body))
    await commit(request, gen)
    return response


def _served(request: Request) -> tuple[str, ModelDetails]:
    """The served model's name (tagged ``latest`` where its name has no tag, as Ollama lists names) and details."""
    state = state_of(request)
    name = state.model_name if ":" in state.model_name else f"{state.model_name}:latest"
    family = state.formats.family or "forge"
    return name, ModelDetails(parent_model="", format="safetensors", family=family, families=[family])


def _digest(request: Request) -> str:
    """Stands for the served weights: a new policy version is a new digest."""
    state = state_of(request)
    return hashlib.sha256(f"{state.model_name}@{state.engine.version}".encode()).hexdigest()


@router.get("/api/tags")
@router.get("/s/{session}/api/tags")
async def tags(request: Request):
    """The one model this gateway serves (any model name in a request reaches it). ``name`` is sent
    beside ``model``, as Ollama does (the client's type has only ``model``)."""
    name, details = _served(request)
    model = ListResponse.Model(model=name, modified_at=datetime.now(timezone.utc), digest=_digest(request), size=0, details=details)
    body = ollama_json(ListResponse(models=[model]))
    body["models"][0] = {"name": name, **body["models"][0]}
    return JSONResponse(body)


@router.post("/api/show", openapi_extra=body_schema(ShowRequest))
@router.post("/s/{session}/api/show", openapi_extra=body_schema(ShowRequest))
async def show(request: Request):
    """What the served model can do: ``completion`` and ``tools`` always, ``thinking`` with a
    reasoning parser; ``model_info`` its family and context length (under any model name)."""
    req: ShowRequest = validate(ShowRequest, await read_json(request))
    if req.model is None and req.name is None:
        raise APIError(400, "model: is required", param="model")
    state = state_of(request)
    _, details = _served(request)
    family = details.family
    capabilities = ["completion", "tools"] + (["thinking"] if state.formats.reasoning() is not None else [])
    info = {"general.architecture": family, "general.basename": state.model_name, f"{family}.context_length": state.engine.max_model_len}
    body = ShowResponse(modified_at=datetime.now(timezone.utc), modelfile="", parameters="", details=details, model_info=info,
                        capabilities=capabilities)
    return JSONResponse(ollama_json(body))


@router.get("/api/version")
@router.get("/s/{session}/api/version")
async def version(request: Request):
    return JSONResponse({"version": API_VERSION})


@router.get("/api/ps")
@router.get("/s/{session}/api/ps")
async def running(request: Request):
    """The served model, always loaded: no ``expires_at``, sizes unknown (0)."""
    name, details = _served(request)
    model = ProcessResponse.Model(model=name, name=name, digest=_digest(request), size=0, size_vram=0, details=details,
                                  context_length=state_of(request).engine.max_model_len)
    return JSONResponse(ollama_json(ProcessResponse(models=[model])))

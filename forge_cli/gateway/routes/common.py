"""What every generation endpoint shares: body parsing, auth, sampling, generating, recording.

Rendering and tokenising run in a worker thread (a long prompt must not stall other requests or
``/health``), after a bound that needs no tokenising has refused a prompt that cannot fit. A
non-streamed call is recorded only once its response body is made (:func:`commit`), so nothing is
recorded that the client is never answered.

What a completion's :class:`~forge_cli.pool.types.Sampling` records (:func:`sampling_record`): at
the top level, what the engine used (``max_tokens``, ``temperature``, ``top_p``, ``stop``,
``stop_token_ids``, ``seed``, ``n``, ``top_logprobs``); ``training``, whether the session was
opened for training; ``asked``, the request's own sampling fields exactly as sent (``top_k``,
penalties, … included: a field in ``asked`` with no top-level counterpart was not applied);
``output_format`` when one was asked for.
A training session samples with ``top_p = 1`` and no ``top_k`` or penalties whatever was asked
(:func:`training_params`), so that the recorded logprobs are ``log_softmax(logits / T)`` over the
whole vocabulary, as the trainer computes them.

The ``x-forge-agent`` header (:func:`agent_of`) names which agent of a trajectory made a call
(``orchestrator``, ``worker-2``); it is recorded as the completion's ``agent``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields, replace
from typing import Any, AsyncIterator

from fastapi import Request
from openai.types.completion_usage import CompletionUsage, PromptTokensDetails
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from forge_cli.engine.base import GenerationOutput, SamplingParams
from forge_cli.errors import ForgeError
from forge_cli.gateway.body import parse_json
from forge_cli.gateway.errors import APIError, describe_validation, sse
from forge_cli.gateway.middleware import drain
from forge_cli.gateway.render import Rendered, Tool, Turn, check_fits, parse_output, render_prompt
from forge_cli.gateway.state import GatewayState, Session
from forge_cli.gateway.streaming import ContentStream
from forge_cli.pool.types import PromptHistory, Sampling
from forge_cli.specs import ParsedOutput

DEFAULT_MAX_TOKENS = 1024
INLINE_BYTES = 64 * 1024  # smaller bodies are parsed on the event loop (a thread hop costs more)
AGENT_HEADER = "x-forge-agent"
MAX_AGENT_LEN = 64
# the request fields (of any API) that shape sampling: recorded verbatim as what was asked
SAMPLING_FIELDS = (
    "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "logit_bias", "seed", "n", "max_tokens", "max_completion_tokens", "max_output_tokens", "stop", "stop_sequences",
)


async def read_json(request: Request, *, optional: bool = False) -> dict[str, Any]:
    """The body as a JSON object (``optional``: an empty body is ``{}``)."""
    limit = getattr(request.app.state, "max_body_bytes", None)
    chunks, total = [], 0
    try:
        async for chunk in request.stream():  # chunked bodies have no Content-Length to check
            total += len(chunk)
            if limit is not None and total > limit:
                await drain(request.receive)  # the rest read and dropped (bounded): the 413 then arrives whole
                raise APIError(413, f"the request body is over the limit of {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        raise APIError(400, "the client disconnected before the request body was complete") from None
    body = b"".join(chunks)
    if optional and not body.strip():
        return {}
    data = parse_json(body) if len(body) <= INLINE_BYTES else await run_in_threadpool(parse_json, body)
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object")
    return data


def wire_json(model: BaseModel) -> dict[str, Any]:
    """A response body or stream event, built as the OpenAI or Anthropic SDK's own model, as the
    provider sends it: the SDK's dump (JSON types, API names, only the fields the gateway set)."""
    return model.to_dict(mode="json")  # type: ignore[attr-defined]  # the SDKs' BaseModel


def sse_event(model: BaseModel, event: str | None = None) -> str:
    """One server-sent event carrying an SDK model (``event``: the SSE event name, Anthropic's and Responses')."""
    return sse(wire_json(model), event)


def validate(model: type[BaseModel], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message, param = describe_validation(exc)
        raise APIError(400, message, param=param) from None


def api_key(request: Request) -> str | None:
    """The request's key: ``Authorization: Bearer`` (OpenAI, Ollama), ``x-api-key`` (Anthropic),
    ``api-key`` (Azure), ``x-goog-api-key`` or the ``key`` query parameter (Gemini)."""
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    return (request.headers.get("x-api-key") or request.headers.get("api-key") or request.headers.get("x-goog-api-key")
            or request.query_params.get("key") or None)


def state_of(request: Request) -> GatewayState:
    return request.app.state.gateway


def agent_of(request: Request) -> str | None:
    """The ``x-forge-agent`` header: which agent of the trajectory makes this call (None: not told).
    1 to 64 printable ASCII characters, else a 400."""
    values = request.headers.getlist(AGENT_HEADER)
    if not values:
        return None
    agent = values[0].strip()
    if len(values) > 1 or not 1 <= len(agent) <= MAX_AGENT_LEN or not all(" " <= ch <= "~" for ch in agent):
        raise APIError(400, f"{AGENT_HEADER}: must be one name of 1 to {MAX_AGENT_LEN} printable ASCII characters "
                            f"(such as 'orchestrator' or 'worker-2')", param=AGENT_HEADER)
    return agent


def training_params(params: SamplingParams) -> SamplingParams:
    """How a training session samples: as asked, but over the whole vocabulary (``top_p = 1``; the
    engines apply no top_k or penalties), so the engine's logprobs are the trainer's."""
    return params if params.top_p == 1.0 else replace(params, top_p=1.0)


def sampling_record(params: SamplingParams, *, training: bool, raw: dict[str, Any] | None,
                    output_format: dict[str, Any] | None = None, asked: dict[str, Any] | None = None) -> Sampling:
    """A completion's :class:`Sampling`: what was used (top level), ``training``, what was ``asked``
    (the request's sampling fields as sent; ``asked``: for an API that keeps them below the top
    level, Ollama's ``options``) and ``output_format`` (see the module's docstring)."""
    used = {f.name: getattr(params, f.name) for f in fields(params)}  # every field, by its own name
    if asked is None:
        asked = {k: raw[k] for k in SAMPLING_FIELDS if raw and raw.get(k) is not None}
    return Sampling(
        **used, training=training, asked=asked,
        output_format=output_format,  # recorded as asked, whether or not the engine could enforce it
    )


async def session_of(request: Request) -> Session:
    return await state_of(request).resolve(api_key(request), request.path_params.get("session"))


async def counting_format(request: Request) -> Any:
    """The tool format a token count renders with: the session's (with the same auth as a call) when
    the request names one or the gateway is strict, else the defaults — counting opens no trajectory."""
    state = state_of(request)
    key, in_path = api_key(request), request.path_params.get("session")
    if in_path is not None or key in state.by_key or state.auth == "strict":
        return state.tool_format_for(await state.resolve(key, in_path))
    return state.formats.get()


def check_conversation(turns: list[Turn], param: str = "messages") -> None:
    """400 unless there is something to answer: a user, assistant or tool turn, not only instructions."""
    if not any(t.role != "system" for t in turns):
        raise APIError(400, f"{param}: there is no user or assistant message to answer (only system instructions)", param=param)


@dataclass
class Prepared:
    """A request ready for the engine: its session, format, rendered prompt and checked params.
    ``output_format``: the structured output asked for (see ``protocol.types.output_format``);
    ``params`` are the ones the engine uses (a training session's, :func:`training_params`);
    ``agent``: the ``x-forge-agent`` header."""

    session: Session
    fmt: Any
    rendered: Rendered
    params: SamplingParams
    tools: list[Tool]
    turns: list[Turn]
    raw: dict[str, Any] | None
    output_format: dict[str, Any] | None = None
    agent: str | None = None
    history: PromptHistory | None = None  # how the prompt matched what the session sampled before
    asked: dict[str, Any] | None = None  # the sampling fields as sent, where they are not at the body's top level


@dataclass
class Generated:
    """One call's result: the prompt, each sample, and each sample parsed for the client."""

    prompt_ids: list[int]
    outputs: list[GenerationOutput]
    parsed: list[ParsedOutput]
    session: Session
    prepared: Prepared | None = None
    started: float = 0.0


async def prepare(
    request: Request,
    turns: list[Turn],
    tools: list[Tool],
    params: SamplingParams,
    *,
    tool_choice: str | None = None,
    forced_tool: str | None = None,
    raw: dict[str, Any] | None = None,
    prompt: str | list[int] | None = None,
    output_format: dict[str, Any] | None = None,
    turns_param: str = "messages",
    asked: dict[str, Any] | None = None,
) -> Prepared:
    """Everything that can fail on the client's input, before any response starts.

    ``prompt`` (``/v1/completions``) skips the chat template: text is encoded as it is, ids are used as given.
    ``turns_param`` names the field the turns came from, for the 400 when there is nothing to answer.
    ``asked``: the request's sampling fields as sent, where they are not at its top level (Ollama's ``options``).
    """
    state = state_of(request)
    tok, engine = state.tokenizer, state.engine
    if prompt is None:
        check_conversation(turns, turns_param)
    agent = agent_of(request)
    session = await session_of(request)
    if session.training:
        params = training_params(params)
    if session.token_budget is not None:  # the trajectory's token budget: spent, or what is left of it
        left = session.token_budget - session.tokens_out
        if left <= 0:
            raise APIError(409, f"this trajectory's budget of {session.token_budget} output tokens is spent",
                           kind="invalid_request_error")
        if params.max_tokens > left:
            params = replace(params, max_tokens=left)
    fmt = state.tool_format_for(session)

    history: PromptHistory | None = None

    status: str | None = None

    def render() -> Rendered | None:  # in a worker thread (one trip: the recording check, then the prompt)
        nonlocal history, status
        status = state.recording_status(session)
        if status not in (None, "running"):
            return None
        if prompt is None:
            shown = state.restore_thinking(session, turns) if fmt.rendering != "text" else turns
            rendered = render_prompt(tok, shown, tools, fmt, tool_choice=tool_choice, forced_tool=forced_tool,
                                     max_len=engine.max_model_len)
            rendered.prompt_ids, history = state.reuse_ids(session, rendered.text, rendered.prompt_ids,
                                                           has_history=any(t.role == "assistant" for t in turns))
            return rendered
        if isinstance(prompt, str):
            check_fits(tok, prompt, engine.max_model_len, "prompt")
            return Rendered(tok.encode(prompt, add_special_tokens=False), prompt)
        _check(engine, prompt, params)  # before decoding what may be millions of ids
        return Rendered(list(prompt), tok.decode(prompt))

    rendered = await run_in_threadpool(render)
    state.refuse_ended(session, status)
    assert rendered is not None
    params = _check(engine, rendered.prompt_ids, params)
    return Prepared(session, fmt, rendered, params, tools, turns, raw, output_format, agent, history, asked=asked)


def parser_name(fmt: Any) -> str:
    """The name of what parsed a format's calls: ``native``'s parser, else the format itself."""
    parser = getattr(fmt, "parser", None)
    return f"{fmt.name}:{parser.name}" if parser is not None else fmt.name


def _check(engine: Any, prompt_ids: list[int], params: SamplingParams) -> SamplingParams:
    try:
        return engine.check(prompt_ids, params)
    except ForgeError as exc:
        raise APIError(400, str(exc), param="messages") from None


def _context(p: Prepared) -> dict[str, Any]:
    """What a scripted policy sees: the messages (assistant turns with their tool calls), the tools,
    the requested output format, the session and the rendered prompt."""
    messages = []
    for t in p.turns:
        message: dict[str, Any] = {"role": t.role, "content": t.content}
        if t.tool_calls:
            message["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in t.tool_calls]
        messages.append(message)
    return {
        "messages": messages,
        "tools": [t.schema() for t in p.tools],
        "output_format": p.output_format,
        "session": p.session.id,
        "agent": p.agent,
        "prompt_text": p.rendered.text,
    }


async def _finish(request: Request, p: Prepared, outputs: list[GenerationOutput], started: float) -> Generated:
    """Parse, count and remember the thinking of what the engine produced (the session's history and the
    recording are :func:`commit`'s)."""
    state = state_of(request)
    reasoning = state.formats.reasoning()
    parsed = [parse_output(state.tokenizer, o.output_ids, o.stop_reason, p.fmt, p.tools, reasoning) for o in outputs]
    state.metrics.tokens.labels("prompt").inc(len(p.rendered.prompt_ids))
    state.metrics.tokens.labels("output").inc(sum(len(o.output_ids) for o in outputs))
    state.metrics.parse_errors.labels(parser_name(p.fmt)).inc(sum(len(x.errors) for x in parsed))
    if reasoning is not None:
        state.metrics.reasoning.labels(reasoning.name).inc(sum(1 for x in parsed if x.reasoning))
    state.remember_thinking(p.session, parsed)  # its history (decoding the whole prompt) comes with commit's record
    return Generated(p.rendered.prompt_ids, outputs, parsed, p.session, p, started)


async def commit(request: Request, gen: Generated) -> None:
    """Record a call into its session's trajectory: once its response is ready to send."""
    p = gen.prepared
    assert p is not None
    sampling = sampling_record(p.params, training=p.session.training, raw=p.raw, output_format=p.output_format, asked=p.asked)
    errors = [[{"text": e.text, "reason": e.reason} for e in x.errors] for x in gen.parsed]
    calls = [[{"name": c.name, "arguments": c.arguments} for c in x.calls] for x in gen.parsed]
    state = state_of(request)
    await state.record(p.session, p.rendered.prompt_ids, gen.outputs, sampling=sampling, started_at=gen.started,
                       tool_format=p.fmt.name, parse_errors=errors, request=p.raw, agent=p.agent, tool_calls=calls,
                       history=p.history)
    if p.history is not None:
        state.metrics.history.labels(p.history.kind, p.session.scaffold or "external", p.fmt.name, state.formats.family).inc()


async def generate(request: Request, turns: list[Turn], tools: list[Tool], params: SamplingParams, **kw: Any) -> Generated:
    """Render, generate and parse one call for the request's session; :func:`commit` records it."""
    p = await prepare(request, turns, tools, params, **kw)
    started = time.time()
    try:
        outputs = await state_of(request).engine.generate(p.rendered.prompt_ids, p.params, context=_context(p))
    except ForgeError as exc:
        raise APIError(400, str(exc), param="messages") from None
    return await _finish(request, p, outputs, started)


async def stream(request: Request, p: Prepared) -> AsyncIterator[tuple[str, Any]]:
    """Generate one sample as it is made: ``("reasoning", piece)`` events of thinking (with a
    reasoning parser) and ``("text", piece)`` events of safe content, then
    ``("done", Generated)`` (already recorded), whose parsed content equals everything streamed
    plus what :meth:`ContentStream.rest` adds (sent as a last text event before ``done``)."""
    state = state_of(request)
    content = ContentStream(state.tokenizer, p.fmt if (p.tools or p.fmt.rendering == "code") else None, p.params.stop, state.formats.reasoning())
    started = time.time()
    final = None
    async for item in state.engine.generate_stream(p.rendered.prompt_ids, p.params, context=_context(p)):
        if isinstance(item, GenerationOutput):
            final = item
            continue
        thinking, piece = content.feed_parts(item)
        if thinking:
            yield "reasoning", thinking
        if piece:
            yield "text", piece
    assert final is not None
    gen = await _finish(request, p, [final], started)
    await commit(request, gen)
    if rest := content.rest_reasoning(gen.parsed[0].reasoning):
        yield "reasoning", rest
    if rest := content.rest(gen.parsed[0].content):
        yield "text", rest
    yield "done", gen


def sampling(
    *, max_tokens: int | None, temperature: float | None, top_p: float | None, stop: Any, seed: int | None, n: int = 1,
    top_logprobs: int | None = None,
) -> SamplingParams:
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if len(stops) > 16:
        raise APIError(400, "stop: at most 16 stop sequences", param="stop")
    try:
        return SamplingParams(
            max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
            temperature=1.0 if temperature is None else temperature,
            top_p=1.0 if top_p is None else top_p,
            stop=stops,
            seed=seed,
            n=n,
            top_logprobs=top_logprobs or 0,
        )
    except ForgeError as exc:
        raise APIError(400, str(exc)) from None


def openai_usage(gen: Generated) -> CompletionUsage:
    """The ``usage`` of a chat or legacy completion, streamed or not: every sample's output tokens,
    and the prompt's tokens the engine found cached."""
    n_prompt, n_output = len(gen.prompt_ids), sum(len(o.output_ids) for o in gen.outputs)
    return CompletionUsage(prompt_tokens=n_prompt, completion_tokens=n_output, total_tokens=n_prompt + n_output,
                           prompt_tokens_details=PromptTokensDetails(cached_tokens=gen.outputs[0].extra.get("cached_tokens", 0)))


def finish_reason(output: GenerationOutput, parsed: ParsedOutput) -> str:
    if parsed.calls:
        return "tool_calls"
    return "length" if output.finish_reason == "length" else "stop"

"""What every generation endpoint shares: body parsing, auth, sampling, generating, recording."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator

from fastapi import Request
from pydantic import BaseModel, ValidationError

from forge_cli.engine.base import GenerationOutput, SamplingParams
from forge_cli.errors import ForgeError
from forge_cli.gateway.errors import APIError, describe_validation
from forge_cli.gateway.render import Rendered, Tool, Turn, parse_output, render_prompt
from forge_cli.gateway.state import GatewayState, Session
from forge_cli.specs import ParsedOutput

DEFAULT_MAX_TOKENS = 1024


async def read_json(request: Request, *, optional: bool = False) -> dict[str, Any]:
    """The body as a JSON object (``optional``: an empty body is ``{}``)."""
    limit = getattr(request.app.state, "max_body_bytes", None)
    chunks, total = [], 0
    async for chunk in request.stream():  # chunked bodies have no Content-Length to check
        total += len(chunk)
        if limit is not None and total > limit:
            raise APIError(413, f"the request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    if optional and not body.strip():
        return {}
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise APIError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object")
    return data


def validate(model: type[BaseModel], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message, param = describe_validation(exc)
        raise APIError(400, message, param=param) from None


def api_key(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    return request.headers.get("x-api-key") or request.headers.get("api-key")


def state_of(request: Request) -> GatewayState:
    return request.app.state.gateway


async def session_of(request: Request) -> Session:
    return await state_of(request).resolve(api_key(request), request.path_params.get("session"))


@dataclass
class Generated:
    """One call's result: the prompt, each sample, and each sample parsed for the client."""

    prompt_ids: list[int]
    outputs: list[GenerationOutput]
    parsed: list[ParsedOutput]
    session: Session


@dataclass
class Prepared:
    """A request ready for the engine: its session, format, rendered prompt and checked params."""

    session: Session
    fmt: Any
    rendered: Rendered
    params: SamplingParams
    tools: list[Tool]
    turns: list[Turn]
    raw: dict[str, Any] | None


async def prepare(
    request: Request,
    turns: list[Turn],
    tools: list[Tool],
    params: SamplingParams,
    *,
    tool_choice: str | None = None,
    forced_tool: str | None = None,
    raw: dict[str, Any] | None = None,
    prompt_ids: list[int] | None = None,
) -> Prepared:
    """Everything that can fail on the client's input, before any response starts.

    ``prompt_ids`` (``/v1/completions``) skips the chat template: the ids are used as given.
    """
    state = state_of(request)
    session = await session_of(request)
    await state.check_recording(session)
    fmt = state.tool_format_for(session)
    if prompt_ids is None:
        rendered = render_prompt(state.tokenizer, turns, tools, fmt, tool_choice=tool_choice, forced_tool=forced_tool)
        rendered.prompt_ids = state.reuse_ids(session, rendered.text, rendered.prompt_ids)
    else:
        rendered = Rendered(prompt_ids, state.tokenizer.decode(prompt_ids))
    try:
        params = state.engine.check(rendered.prompt_ids, params)
    except ForgeError as exc:
        raise APIError(400, str(exc), param="messages") from None
    return Prepared(session, fmt, rendered, params, tools, turns, raw)


def _context(p: Prepared) -> dict[str, Any]:
    return {
        "messages": [{"role": t.role, "content": t.content} for t in p.turns],
        "tools": [t.schema() for t in p.tools],
        "session": p.session.id,
        "prompt_text": p.rendered.text,
    }


async def _finish(request: Request, p: Prepared, outputs: list[GenerationOutput], started: float) -> Generated:
    """Parse, count, remember and record what the engine produced."""
    state = state_of(request)
    parsed = [parse_output(state.tokenizer, o.output_ids, o.stop_reason, p.fmt, p.tools) for o in outputs]
    errors = [[{"text": e.text, "reason": e.reason} for e in x.errors] for x in parsed]
    state.metrics.tokens.labels("prompt").inc(len(p.rendered.prompt_ids))
    state.metrics.tokens.labels("output").inc(sum(len(o.output_ids) for o in outputs))
    state.metrics.parse_errors.inc(sum(len(e) for e in errors))
    state.remember(p.session, p.rendered.prompt_ids, outputs)
    await state.record(p.session, p.rendered.prompt_ids, outputs, sampling=p.params.as_dict(), started_at=started,
                       tool_format=p.fmt.name, parse_errors=errors, request=p.raw)
    return Generated(p.rendered.prompt_ids, outputs, parsed, p.session)


async def generate(request: Request, turns: list[Turn], tools: list[Tool], params: SamplingParams, **kw: Any) -> Generated:
    """Render, generate, parse and record one call for the request's session."""
    p = await prepare(request, turns, tools, params, **kw)
    started = time.time()
    try:
        outputs = await state_of(request).engine.generate(p.rendered.prompt_ids, p.params, context=_context(p))
    except ForgeError as exc:
        raise APIError(400, str(exc), param="messages") from None
    return await _finish(request, p, outputs, started)


async def stream(request: Request, p: Prepared) -> AsyncIterator[tuple[str, Any]]:
    """Generate one sample as it is made: ``("text", piece)`` events of safe content, then
    ``("done", Generated)``, whose parsed content equals everything streamed plus what
    :meth:`ContentStream.rest` adds (sent as a last text event before ``done``)."""
    from forge_cli.gateway.streaming import ContentStream

    state = state_of(request)
    content = ContentStream(state.tokenizer, p.fmt if p.tools else None, p.params.stop)
    started = time.time()
    final = None
    async for item in state.engine.generate_stream(p.rendered.prompt_ids, p.params, context=_context(p)):
        if isinstance(item, GenerationOutput):
            final = item
        elif piece := content.feed(item):
            yield "text", piece
    assert final is not None
    gen = await _finish(request, p, [final], started)
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


def finish_reason(output: GenerationOutput, parsed: ParsedOutput) -> str:
    if parsed.calls:
        return "tool_calls"
    return "length" if output.finish_reason == "length" else "stop"

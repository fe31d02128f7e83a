"""The Gemini API: ``/v1beta/models/{model}:generateContent``, ``:streamGenerateContent`` (``alt=sse``:
server-sent events; else Google's streamed JSON array), ``:countTokens``, ``GET /v1beta/models``
and ``GET /v1beta/models/{model}`` — each also under ``/s/{session}``.

Every body and chunk is google-genai's own type (``GenerateContentResponse``, ``CountTokensResponse``,
``Model``, …) dumped as the API sends it (:func:`gemini_json`: camelCase, only the fields set).

How the request becomes :class:`Turn`\\ s: ``systemInstruction`` is the system turn; a ``model`` turn
is an assistant turn (its text parts joined as they are, ``thought`` parts its reasoning,
``functionCall`` parts its tool calls, with the call's ``id`` or ``call_<turn>_<k>``); a
``functionResponse`` part is a tool turn answering the earlier unanswered call of that id, else of
that name, its ``response`` as text (``{"output"|"result"|"content": text}``: the text;
``{"error": text}``: ``[error] text``; anything else: its JSON); the other text parts of a user
turn are one user turn after its tool turns, joined with newlines. The thinking comes back as
``thought`` parts only when ``thinkingConfig.includeThoughts`` is true, as Google's does.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, AsyncIterator, Iterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from google.genai.types import (Candidate, Content, CountTokensResponse, FinishReason, FunctionCall, GenerateContentResponse,
                                GenerateContentResponseUsageMetadata, LogprobsResult, LogprobsResultCandidate,
                                LogprobsResultTopCandidates, MediaModality, ModalityTokenCount, Model, Part)
from pydantic import BaseModel
from pydantic.alias_generators import to_camel
from starlette.concurrency import run_in_threadpool

from forge_cli.engine.base import SamplingParams
from forge_cli.gateway.errors import APIError, sse
from forge_cli.gateway.openapi import body_schema
from forge_cli.gateway.protocol.gemini import (ContentIn, CountTokensRequest, FunctionResponseIn, GenerateContentRequest,
                                               GenerationConfig, PartIn)
from forge_cli.gateway.protocol.types import output_format
from forge_cli.gateway.render import Tool, Turn, arguments_object, render_prompt
from forge_cli.gateway.routes.common import (Generated, counting_format, check_conversation, commit, generate, prepare, read_json,
                                             sampling, state_of, stream, validate)
from forge_cli.gateway.token_text import json_logprob, logprob_entries
from forge_cli.specs import ParsedOutput, ToolCall

router = APIRouter()

ACTIONS = ("generateContent", "streamGenerateContent", "countTokens")
_GOOGLE_TYPES = {"TYPE_UNSPECIFIED", "STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"}
_UNSUPPORTED_PARTS = {"inline_data": "inlineData", "file_data": "fileData", "executable_code": "executableCode",
                      "code_execution_result": "codeExecutionResult"}
_RESULT_KEYS = ("output", "result", "content")
_ASKED = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "seed": "seed", "candidate_count": "n",
          "max_output_tokens": "max_output_tokens", "stop_sequences": "stop_sequences", "presence_penalty": "presence_penalty",
          "frequency_penalty": "frequency_penalty"}  # generationConfig's name → the record's (common.SAMPLING_FIELDS)


def gemini_json(model: BaseModel) -> dict[str, Any]:
    """A google-genai type as the Gemini API sends it: camelCase names, only the fields set."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


# ---- the request ----------------------------------------------------------------------------------


def _kind(part: PartIn, where: str) -> str:
    """What a part holds: ``text``, ``function_call``, ``function_response`` or ``none`` (only a
    thought signature, or a thought flag with no text). Data the gateway does not take is a 400."""
    for name, wire in _UNSUPPORTED_PARTS.items():
        if getattr(part, name) is not None:
            raise APIError(400, f"{where}: {wire} parts are not supported (text, functionCall and functionResponse only)",
                           param=where)
    held = [k for k in ("text", "function_call", "function_response") if getattr(part, k) is not None]
    if len(held) > 1:
        raise APIError(400, f"{where}: a part holds one of text, functionCall or functionResponse, not several", param=where)
    if held:
        return held[0]
    if part.thought_signature is not None or part.thought is not None:
        return "none"
    raise APIError(400, f"{where}: the part is empty (it needs text, functionCall or functionResponse)", param=where)


def _text(parts: list[PartIn], where: str) -> str:
    """The text of a system instruction: its text parts, joined with newlines."""
    texts = []
    for j, part in enumerate(parts):
        kind = _kind(part, f"{where}[{j}]")
        if kind in ("function_call", "function_response"):
            raise APIError(400, f"{where}[{j}]: only text parts are allowed here", param=where)
        if kind == "text" and not part.thought:
            texts.append(part.text or "")
    return "\n".join(texts)


def _result_text(response: dict[str, Any] | None) -> str:
    if not response:
        return ""
    if len(response) == 1:
        [(key, value)] = response.items()
        if isinstance(value, str) and key in _RESULT_KEYS:
            return value
        if isinstance(value, str) and key == "error":
            return f"[error] {value}"
    return json.dumps(response, ensure_ascii=False)


def _answered(open_calls: list[ToolCall], response: FunctionResponseIn, where: str) -> ToolCall:
    """The earlier unanswered call a function response answers: by id where it has one, else by name."""
    for k, call in enumerate(open_calls):
        if response.id is not None and call.id == response.id:
            return open_calls.pop(k)
    for k, call in enumerate(open_calls):
        if call.name == response.name:
            return open_calls.pop(k)
    raise APIError(400, f"{where}.functionResponse: answers no earlier functionCall named {response.name!r} "
                        f"(each functionResponse follows the model turn whose functionCall it answers)", param=where)


def _model_turn(content: ContentIn, i: int, open_calls: list[ToolCall]) -> Turn:
    text, thinking, calls = [], [], []
    for j, part in enumerate(content.parts):
        where = f"contents[{i}].parts[{j}]"
        kind = _kind(part, where)
        if kind == "function_call":
            fc = part.function_call
            calls.append(ToolCall(name=fc.name, arguments=fc.args or {}, id=fc.id or f"call_{i}_{len(calls)}"))
        elif kind == "function_response":
            raise APIError(400, f"{where}: functionResponse parts belong to user turns, not model turns", param=where)
        elif kind == "text":
            (thinking if part.thought else text).append(part.text or "")
    open_calls.extend(calls)
    return Turn("assistant", "".join(text), calls, reasoning="".join(thinking))


def to_turns(req: GenerateContentRequest) -> list[Turn]:
    """``systemInstruction`` and ``contents`` as the gateway's turns (see the module's docstring)."""
    turns: list[Turn] = []
    if req.system_instruction is not None:
        turns.append(Turn("system", _text(req.system_instruction.parts, "systemInstruction.parts")))
    open_calls: list[ToolCall] = []  # calls not answered yet, oldest first
    for i, content in enumerate(req.contents):
        if content.role == "model":
            turns.append(_model_turn(content, i, open_calls))
            continue
        texts = []
        for j, part in enumerate(content.parts):
            where = f"contents[{i}].parts[{j}]"
            kind = _kind(part, where)
            if kind == "function_response":
                fr = part.function_response
                call = _answered(open_calls, fr, where)
                turns.append(Turn("tool", _result_text(fr.response), name=fr.name, tool_call_id=call.id))
            elif kind == "function_call":
                raise APIError(400, f"{where}: functionCall parts belong to model turns, not {content.role or 'user'} turns",
                               param=where)
            elif kind == "text" and not part.thought:
                texts.append(part.text or "")
        if texts:
            turns.append(Turn("user", "\n".join(texts)))
    return turns


def json_schema(schema: Any) -> Any:
    """Google's OpenAPI-subset schema (``"type": "OBJECT"``) as a JSON schema: its type names in lower case."""
    if isinstance(schema, list):
        return [json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str) and value in _GOOGLE_TYPES:
            out[key] = value.lower()
        elif key == "type" and isinstance(value, list):
            out[key] = [v.lower() if isinstance(v, str) and v in _GOOGLE_TYPES else v for v in value]
        else:
            out[key] = json_schema(value)
    return out


def to_tools(req: GenerateContentRequest) -> list[Tool]:
    tools = []
    for i, entry in enumerate(req.tools or []):
        for j, fn in enumerate(entry.function_declarations or []):
            if fn.parameters is not None and fn.parameters_json_schema is not None:
                where = f"tools[{i}].functionDeclarations[{j}]"
                raise APIError(400, f"{where}: give parameters or parametersJsonSchema, not both", param=where)
            params = fn.parameters_json_schema if fn.parameters is None else json_schema(fn.parameters)
            tools.append(Tool(fn.name, fn.description or "", params or {"type": "object", "properties": {}}))
    return tools


def tool_choice(req: GenerateContentRequest, tools: list[Tool]) -> tuple[str | None, str | None, list[Tool]]:
    """``toolConfig.functionCallingConfig`` as (choice, forced tool, the tools offered): ``NONE``: none;
    ``ANY``: required, or that tool when ``allowedFunctionNames`` names one; ``allowedFunctionNames``
    narrows the tools offered to those it names."""
    config = req.tool_config.function_calling_config if req.tool_config is not None else None
    if config is None:
        return None, None, tools
    where = "toolConfig.functionCallingConfig"
    mode = config.mode or "AUTO"
    names = config.allowed_function_names
    if names is not None and mode != "NONE":
        known = {t.name for t in tools}
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            raise APIError(400, f"{where}.allowedFunctionNames: names {unknown[0] if unknown else 'no'} function "
                                f"{'that is not in functionDeclarations' if unknown else ''}".rstrip(), param=f"{where}.allowedFunctionNames")
        tools = [t for t in tools if t.name in names]
    if mode == "NONE":
        return "none", None, tools
    if mode == "ANY":
        if not tools:
            raise APIError(400, f"{where}.mode: ANY needs functionDeclarations", param=f"{where}.mode")
        return ("required", None, tools) if names is None or len(names) > 1 else (None, names[0], tools)
    return "auto", None, tools


def _output_format(config: GenerationConfig | None) -> dict[str, Any] | None:
    if config is None:
        return None
    schema = config.response_json_schema
    if schema is None and config.response_schema is not None:
        schema = json_schema(config.response_schema)
    mime = config.response_mime_type
    if mime in (None, "text/plain"):
        if schema is not None:
            raise APIError(400, "generationConfig.responseMimeType: a response schema needs 'application/json'",
                           param="generationConfig.responseMimeType")
        return None
    if mime == "application/json":
        return output_format("json_schema", schema=schema) if schema is not None else output_format("json_object")
    raise APIError(400, f"generationConfig.responseMimeType: {mime!r} is not supported (text/plain or application/json)",
                   param="generationConfig.responseMimeType")


def _params(config: GenerationConfig) -> SamplingParams:
    if config.logprobs is not None and not config.response_logprobs:
        raise APIError(400, "generationConfig.logprobs: needs responseLogprobs = true", param="generationConfig.logprobs")
    if any(m.upper() != "TEXT" for m in config.response_modalities or []):
        raise APIError(400, "generationConfig.responseModalities: only TEXT is supported", param="generationConfig.responseModalities")
    return sampling(max_tokens=config.max_output_tokens, temperature=config.temperature, top_p=config.top_p,
                    stop=config.stop_sequences, seed=config.seed, n=config.candidate_count or 1,
                    top_logprobs=config.logprobs if config.response_logprobs else None)


def _asked(raw: dict[str, Any]) -> dict[str, Any]:
    """``generationConfig``'s sampling fields exactly as sent (either spelling), by the names every
    API's record uses (``top_k`` and the penalties: recorded, not applied)."""
    config = raw.get("generationConfig", raw.get("generation_config"))
    if not isinstance(config, dict):
        return {}
    asked = {}
    for theirs, ours in _ASKED.items():
        value = config.get(to_camel(theirs), config.get(theirs))
        if value is not None:
            asked[ours] = value
    return asked


def _request(req: GenerateContentRequest) -> tuple[list[Turn], list[Tool], str | None, str | None]:
    if req.cached_content is not None:
        raise APIError(400, "cachedContent: cached contents are not supported; send the contents", param="cachedContent")
    tools = to_tools(req)
    choice, forced, tools = tool_choice(req, tools)
    return to_turns(req), tools, choice, forced


# ---- the response ---------------------------------------------------------------------------------


def _call_parts(parsed: ParsedOutput) -> list[Part]:
    return [Part(function_call=FunctionCall(id=c.id or f"call_{secrets.token_hex(8)}", name=c.name, args=arguments_object(c)))
            for c in parsed.calls]


def _parts(parsed: ParsedOutput, thoughts: bool) -> list[Part]:
    """The answer's parts: its thinking (``thoughts``: asked for), its text (an empty answer is one
    empty text part), then one ``functionCall`` part per call."""
    parts = [Part(text=parsed.reasoning, thought=True)] if thoughts and parsed.reasoning else []
    if parsed.content or not parsed.calls:
        parts.append(Part(text=parsed.content))
    return parts + _call_parts(parsed)


def _finish(out: Any, parsed: ParsedOutput) -> FinishReason:
    return FinishReason.MAX_TOKENS if out.finish_reason == "length" and not parsed.calls else FinishReason.STOP


def _logprobs(tokenizer: Any, out: Any, top: int) -> LogprobsResult:
    """Each output token with its logprob (the recorded one) and, ``top`` > 0, its alternatives."""
    entries = logprob_entries(tokenizer, out)
    chosen = [LogprobsResultCandidate(token=e["token"], token_id=t, log_probability=e["logprob"])
              for (e, _), t in zip(entries, out.output_ids)]
    tops = None
    if top:
        tops = [LogprobsResultTopCandidates(candidates=[LogprobsResultCandidate(token=a["token"], token_id=i, log_probability=a["logprob"])
                                                        for a, (i, _) in zip(alts, ids)])
                for (_, alts), ids in zip(entries, out.top_logprobs or [[] for _ in entries])]
    return LogprobsResult(chosen_candidates=chosen, top_candidates=tops,
                          log_probability_sum=json_logprob(sum(c.log_probability for c in chosen)))


def _avg_logprob(out: Any) -> float | None:
    return json_logprob(sum(out.logprobs) / len(out.logprobs)) if out.logprobs else None


def _usage(tokenizer: Any, gen: Generated) -> GenerateContentResponseUsageMetadata:
    """Token counts; ``thoughtsTokenCount``: the thinking re-encoded (the split falls inside the sampled
    ids, so it is an estimate), ``candidatesTokenCount`` the rest of the output."""
    n_prompt, n_output = len(gen.prompt_ids), sum(len(o.output_ids) for o in gen.outputs)
    thoughts = sum(min(len(tokenizer.encode(p.reasoning, add_special_tokens=False)), len(o.output_ids))
                   for o, p in zip(gen.outputs, gen.parsed) if p.reasoning)
    cached = gen.outputs[0].extra.get("cached_tokens", 0)
    return GenerateContentResponseUsageMetadata(
        prompt_token_count=n_prompt, candidates_token_count=n_output - thoughts, total_token_count=n_prompt + n_output,
        thoughts_token_count=thoughts or None, cached_content_token_count=cached or None,
        prompt_tokens_details=[ModalityTokenCount(modality=MediaModality.TEXT, token_count=n_prompt)])


class _Reply:
    """What every body and chunk of one call shares: the model's name, the response id, the options."""

    def __init__(self, request: Request, model: str, config: GenerationConfig) -> None:
        self.tokenizer = state_of(request).tokenizer
        self.model = model
        self.id = secrets.token_urlsafe(15)
        self.thoughts = bool(config.thinking_config and config.thinking_config.include_thoughts)
        self.logprobs = (config.logprobs or 0) if config.response_logprobs else None  # None: not asked for

    def body(self, candidates: list[Candidate], usage: GenerateContentResponseUsageMetadata | None = None) -> dict[str, Any]:
        return gemini_json(GenerateContentResponse(candidates=candidates, usage_metadata=usage, model_version=self.model,
                                                   response_id=self.id))

    def candidate(self, index: int, out: Any, parsed: ParsedOutput, parts: list[Part] | None = None) -> Candidate:
        logprobs = _logprobs(self.tokenizer, out, self.logprobs) if self.logprobs is not None else None
        return Candidate(content=Content(role="model", parts=_parts(parsed, self.thoughts) if parts is None else parts),
                         finish_reason=_finish(out, parsed), index=index, avg_logprobs=_avg_logprob(out), logprobs_result=logprobs)

    def piece(self, text: str, thought: bool = False) -> dict[str, Any]:
        part = Part(text=text, thought=True) if thought else Part(text=text)
        return self.body([Candidate(content=Content(role="model", parts=[part]), index=0)])

    def whole(self, gen: Generated) -> dict[str, Any]:
        return self.body([self.candidate(i, o, p) for i, (o, p) in enumerate(zip(gen.outputs, gen.parsed))],
                         _usage(self.tokenizer, gen))


async def _read(request: Request) -> tuple[GenerationConfig, list[Turn], list[Tool], SamplingParams, dict[str, Any]]:
    """A generation request's config, turns, tools, sampling and what ``prepare`` takes besides."""
    raw = await read_json(request)
    req: GenerateContentRequest = validate(GenerateContentRequest, raw)
    config = req.generation_config or GenerationConfig()
    turns, tools, choice, forced = _request(req)
    kw: dict[str, Any] = {"tool_choice": choice, "forced_tool": forced, "raw": raw, "output_format": _output_format(config),
                          "turns_param": "contents", "asked": _asked(raw)}
    return config, turns, tools, _params(config), kw


@router.post("/v1beta/models/{model}:generateContent", openapi_extra=body_schema(GenerateContentRequest))
@router.post("/s/{session}/v1beta/models/{model}:generateContent", openapi_extra=body_schema(GenerateContentRequest))
async def generate_content(request: Request, model: str):
    config, turns, tools, params, kw = await _read(request)
    gen = await generate(request, turns, tools, params, **kw)
    response = JSONResponse(_Reply(request, model, config).whole(gen))
    await commit(request, gen)
    return response


@router.post("/v1beta/models/{model}:streamGenerateContent", openapi_extra=body_schema(GenerateContentRequest))
@router.post("/s/{session}/v1beta/models/{model}:streamGenerateContent", openapi_extra=body_schema(GenerateContentRequest))
async def stream_generate_content(request: Request, model: str):
    """``alt=sse``: one ``data:`` event per chunk; otherwise the chunks as one JSON array, as Google streams it."""
    config, turns, tools, params, kw = await _read(request)
    reply = _Reply(request, model, config)
    as_sse = request.query_params.get("alt") == "sse"
    if params.n == 1:
        prepared = await prepare(request, turns, tools, params, **kw)
        chunks: Any = _live(request, prepared, reply)
    else:
        gen = await generate(request, turns, tools, params, **kw)
        chunks = iter([reply.whole(gen)])  # several candidates: each whole, in one chunk, made before recording
        await commit(request, gen)
    if as_sse:
        return StreamingResponse(_sse(chunks), media_type="text/event-stream")
    return StreamingResponse(_array(chunks), media_type="application/json")


async def _live(request: Request, prepared: Any, reply: _Reply) -> AsyncIterator[dict[str, Any]]:
    """One candidate as the engine samples it: text (and thoughts, if asked for) as it is safe, then a
    last chunk with the function calls, the finish reason and the usage."""
    gen = None
    async for kind, value in stream(request, prepared):
        if kind == "text" and value:
            yield reply.piece(value)
        elif kind == "reasoning" and reply.thoughts and value:
            yield reply.piece(value, thought=True)
        elif kind == "done":
            gen = value
    out, parsed = gen.outputs[0], gen.parsed[0]
    parts = _call_parts(parsed) or [Part(text="")]
    yield reply.body([reply.candidate(0, out, parsed, parts)], _usage(reply.tokenizer, gen))


async def _sse(chunks: Any) -> AsyncIterator[str]:
    async for chunk in _each(chunks):
        yield sse(chunk)


async def _array(chunks: Any) -> AsyncIterator[str]:
    first = True
    async for chunk in _each(chunks):
        yield ("[" if first else ",\r\n") + json.dumps(chunk, separators=(",", ":"))
        first = False
    yield "[]" if first else "]"


async def _each(chunks: AsyncIterator[dict[str, Any]] | Iterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    if hasattr(chunks, "__aiter__"):
        async for chunk in chunks:
            yield chunk
    else:
        for chunk in chunks:
            yield chunk


@router.post("/v1beta/models/{model}:countTokens", openapi_extra=body_schema(CountTokensRequest))
@router.post("/s/{session}/v1beta/models/{model}:countTokens", openapi_extra=body_schema(CountTokensRequest))
async def count_tokens(request: Request, model: str):
    """The prompt's length as a ``generateContent`` call with these contents would render it. Counting
    opens no trajectory: a key seen for the first time uses the defaults."""
    req: CountTokensRequest = validate(CountTokensRequest, await read_json(request))
    if (req.contents is None) == (req.generate_content_request is None):
        raise APIError(400, "countTokens: give contents or generateContentRequest (one of them)", param="contents")
    whole = req.generate_content_request or GenerateContentRequest(contents=req.contents)
    turns, tools, choice, forced = _request(whole)
    check_conversation(turns, "contents")
    state = state_of(request)
    fmt = await counting_format(request)
    rendered = await run_in_threadpool(lambda: render_prompt(state.tokenizer, turns, tools, fmt, tool_choice=choice, forced_tool=forced,
                                                             max_len=state.engine.max_model_len))
    return JSONResponse(gemini_json(CountTokensResponse(total_tokens=len(rendered.prompt_ids))))


# ---- models ---------------------------------------------------------------------------------------


def _model(request: Request, name: str) -> dict[str, Any]:
    """The served policy as a Gemini ``Model``, its ``supportedActions`` by the API's own name,
    ``supportedGenerationMethods`` (the SDK renames the field when it reads a model)."""
    state = state_of(request)
    limit = state.engine.max_model_len
    model = Model(name=f"models/{name}", display_name=name, version="forge", description="A Forge policy: every call is recorded.",
                  input_token_limit=limit, output_token_limit=limit, supported_actions=list(ACTIONS),
                  thinking=True if state.formats.reasoning_name is not None else None)
    data = gemini_json(model)
    data["supportedGenerationMethods"] = data.pop("supportedActions")
    return data


@router.get("/v1beta/models")
@router.get("/s/{session}/v1beta/models")
async def list_models(request: Request):
    return JSONResponse({"models": [_model(request, state_of(request).model_name)]})  # one page: no nextPageToken


@router.get("/v1beta/models/{model}")
@router.get("/s/{session}/v1beta/models/{model}")
async def get_model(request: Request, model: str):
    """Any name is the served policy, as every generation endpoint answers whatever model it is asked for."""
    if ":" in model:
        raise APIError(405, f"{model.split(':', 1)[1]} is called with POST")
    return JSONResponse(_model(request, model))


@router.post("/v1beta/models/{model}:{action}", include_in_schema=False)
@router.post("/s/{session}/v1beta/models/{model}:{action}", include_in_schema=False)
async def unknown_action(request: Request, model: str, action: str):
    raise APIError(404, f"no method {action!r} on models/{model} (this gateway serves {', '.join(ACTIONS)})")

"""``POST /v1/responses`` (what codex and the openai-agents SDK speak), stream and not.

Input items: ``message`` (developer/system/user/assistant), ``function_call`` /
``function_call_output``, ``custom_tool_call`` / ``custom_tool_call_output``; a ``reasoning``
item is the thinking of the assistant turn after it. Tools: ``function`` (incl. ``strict``), ``custom`` (freeform text input),
``namespace`` (nested functions); hosted tools (web_search, tool_search, …) are ignored.

The body and every stream event are the openai SDK's own types (``Response``, its output items,
``ResponseCreatedEvent``, ``ResponseTextDeltaEvent``, …), dumped as the SDK dumps them; a streamed
response keeps one id and one ``created_at`` from ``response.created`` to ``response.completed``.

Conversation state (``store``, ``previous_response_id``): each response answered with ``store``
not false is kept by its session (the trajectory it was recorded into; ``Session.responses``, the
last :data:`MAX_KEPT`, freed when the session is forgotten) as what continuing from it takes: the
full input it was made from (its own ``previous_response_id`` expanded) and its output items as a
client sends them back. A request naming it is rendered as if it had sent ``that input + that
output + its own input``; instructions are not carried over (OpenAI's rule: only the request's
own apply). An id this session did not keep (another session's, a ``store: false`` one, one
evicted or unknown) is OpenAI's 404 ``previous_response_not_found``.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseCustomToolCall,
    ResponseCustomToolCallInputDeltaEvent,
    ResponseCustomToolCallInputDoneEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseFunctionToolCall,
    ResponseIncompleteEvent,
    ResponseReasoningItem,
    ResponseReasoningTextDeltaEvent,
    ResponseReasoningTextDoneEvent,
    ResponseInProgressEvent,
    ResponseOutputItem,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
    ResponseUsage,
    ToolChoiceCustom,
    ToolChoiceFunction,
)
from openai.types.responses.response import IncompleteDetails
from openai.types.responses.response_output_text import Logprob, LogprobTopLogprob
from openai.types.responses.response_reasoning_item import Content as ReasoningContent
from openai.types.responses.response_text_done_event import Logprob as DoneLogprob
from openai.types.responses.response_text_done_event import LogprobTopLogprob as DoneTopLogprob
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic import BaseModel

from forge_cli.engine.base import SamplingParams
from forge_cli.gateway.errors import APIError, sse
from forge_cli.gateway.openapi import body_schema
from forge_cli.gateway.protocol.responses import ResponsesRequest
from forge_cli.gateway.protocol.types import output_format
from forge_cli.gateway.render import Tool, Turn, arguments_json
from forge_cli.gateway.routes.common import (
    Generated,
    commit,
    generate,
    prepare,
    read_json,
    sampling,
    session_of,
    state_of,
    stream,
    validate,
    wire_json,
)
from forge_cli.gateway.state import Session
from forge_cli.gateway.token_text import logprob_entries
from forge_cli.specs import ToolCall

router = APIRouter()
FREEFORM_SCHEMA = {"type": "object", "properties": {"input": {"type": "string", "description": "The raw input text."}}, "required": ["input"]}
HOSTED = {"web_search", "web_search_preview", "tool_search", "file_search", "code_interpreter", "image_generation",
          "computer_use_preview", "local_shell", "mcp"}


def _content(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise APIError(400, f"{where}: content must be a string or a list of parts", param=where)
    out = []
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise APIError(400, f"{where}[{j}]: a content part must be an object", param=where)
        if part.get("type") in ("input_text", "output_text", "text", "summary_text"):
            out.append(str(part.get("text", "")))
        elif part.get("type") == "refusal":
            out.append(str(part.get("refusal", "")))
        else:
            raise APIError(400, f"{where}[{j}]: content part type {part.get('type')!r} is not supported (text only)", param=where)
    return "".join(out)


def to_tools(req: ResponsesRequest) -> tuple[list[Tool], dict[str, str], set[str]]:
    """Tools, the namespace of each namespaced function, and the names of freeform tools."""
    tools: list[Tool] = []
    namespace_of: dict[str, str] = {}
    freeform: set[str] = set()

    def add(t: Any, ns: str | None, where: str) -> None:
        if not isinstance(t, dict):
            raise APIError(400, f"{where}: a tool must be an object", param="tools")
        kind = t.get("type", "function")
        name = t.get("name")
        if not isinstance(kind, str):
            raise APIError(400, f"{where}.type: must be a string", param="tools")
        if kind in HOSTED:
            return
        if not isinstance(name, str) or not name:
            raise APIError(400, f"{where}: a {kind} tool needs a name", param="tools")
        if kind == "function":
            params = t.get("parameters") or {"type": "object", "properties": {}}
            tools.append(Tool(name, t.get("description") or "", params))
        elif kind == "custom":
            tools.append(Tool(name, t.get("description") or "", FREEFORM_SCHEMA, freeform=True))
            freeform.add(name)
        elif kind == "namespace":
            if not isinstance(t.get("tools") or [], list):
                raise APIError(400, f"{where}.tools: must be a list of tools", param="tools")
            for k, inner in enumerate(t.get("tools") or []):
                add(inner, name, f"{where}.tools[{k}]")
            return
        else:
            raise APIError(400, f"{where}: tool type {kind!r} is not supported", param="tools")
        if ns:
            namespace_of[name] = ns

    for i, t in enumerate(req.tools or []):
        if not isinstance(t, dict):
            raise APIError(400, f"tools[{i}]: a tool must be an object", param="tools")
        add(t, None, f"tools[{i}]")
    return tools, namespace_of, freeform


def input_items(req: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's own input as items (a string is one user message)."""
    return [{"type": "message", "role": "user", "content": req.input}] if isinstance(req.input, str) else list(req.input)


def to_turns(req: ResponsesRequest, items: list[dict[str, Any]] | None = None, first: int = 0) -> list[Turn]:
    """The request's turns: its instructions, then ``items`` (default: its input; with a previous
    response, that response's input and output come first, and the request's own begin at ``first``,
    which the errors' ``input[i]`` count from)."""
    turns: list[Turn] = []
    if req.instructions:
        turns.append(Turn("system", req.instructions))
    items = input_items(req) if items is None else items
    names: dict[str, str] = {}  # call_id -> tool name: a tool result names its tool for the template
    thinking = ""  # a reasoning item's text: the thinking of the assistant turn that follows it

    def assistant(content: str, calls: list[ToolCall]) -> None:
        nonlocal thinking
        turns.append(Turn("assistant", content, calls, reasoning=thinking))
        thinking = ""

    for i, item in enumerate(items):
        where = f"input[{i - first}]" if i >= first else "previous_response_id"
        kind = item.get("type", "message" if "role" in item else None)
        if not isinstance(kind, (str, type(None))) or not isinstance(item.get("role", ""), str):
            raise APIError(400, f"{where}: 'type' and 'role' must be strings", param=where)
        if kind == "message":
            role = {"developer": "system"}.get(item.get("role"), item.get("role"))
            if role not in ("system", "user", "assistant"):
                raise APIError(400, f"{where}.role: must be developer, system, user or assistant (got {item.get('role')!r})", param=where)
            if role == "assistant":
                assistant(_content(item.get("content"), f"{where}.content"), [])
            else:
                turns.append(Turn(role, _content(item.get("content"), f"{where}.content")))
        elif kind in ("function_call", "custom_tool_call"):
            name = item.get("name")
            if not isinstance(name, str):
                raise APIError(400, f"{where}.name: is required", param=where)
            if kind == "function_call":
                raw = item.get("arguments", "{}")
                try:
                    args: Any = json.loads(raw) if isinstance(raw, str) and raw.strip() else (raw or {})
                except ValueError:
                    args = raw
            else:
                args = {"input": str(item.get("input", ""))}
            call = ToolCall(name=name, arguments=args, id=item.get("call_id"))
            if isinstance(call.id, str):
                names[call.id] = name
            if turns and turns[-1].role == "assistant" and not thinking:  # parallel calls join one assistant turn
                turns[-1].tool_calls.append(call)
            else:
                assistant("", [call])
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output", "")
            call_id = item.get("call_id") if isinstance(item.get("call_id"), str) else None
            turns.append(Turn("tool", output if isinstance(output, str) else _content(output, f"{where}.output"),
                              name=names.get(call_id or ""), tool_call_id=call_id))
        elif kind == "reasoning":
            thinking = _reasoning_text(item, where)
        elif kind in ("item_reference", "compaction"):
            continue
        else:
            raise APIError(400, f"{where}.type: input item type {kind!r} is not supported", param=where)
    return turns


def _reasoning_text(item: dict[str, Any], where: str) -> str:
    """A reasoning item's thinking: its ``reasoning_text`` content, else its summary's text."""
    parts = item.get("content") or item.get("summary") or []
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise APIError(400, f"{where}: a reasoning item's content and summary must be lists of parts", param=where)
    return "".join(str(p.get("text", "")) for p in parts if p.get("type") in ("reasoning_text", "summary_text"))


LOGPROBS_INCLUDE = "message.output_text.logprobs"


def _wants_logprobs(req: ResponsesRequest) -> bool:
    """``include: ["message.output_text.logprobs"]``: the output text carries its tokens' logprobs."""
    return LOGPROBS_INCLUDE in (req.include or [])


def _logprobs(request: Request, req: ResponsesRequest, output: Any) -> list[Logprob]:
    """The output's token logprobs (with ``top_logprobs`` alternatives) when the request includes them."""
    if not _wants_logprobs(req):
        return []
    return [Logprob(**token, top_logprobs=[LogprobTopLogprob(**top) for top in tops])
            for token, tops in logprob_entries(state_of(request).tokenizer, output)]


def _done_logprobs(logprobs: list[Logprob]) -> list[DoneLogprob]:
    """The text's logprobs as ``response.output_text.done`` types them (no ``bytes``)."""
    return [DoneLogprob(token=lp.token, logprob=lp.logprob,
                        top_logprobs=[DoneTopLogprob(token=t.token, logprob=t.logprob) for t in lp.top_logprobs])
            for lp in logprobs]


def _output_items(parsed: Any, namespace_of: dict[str, str], freeform: set[str], msg_id: str,
                  logprobs: list[Logprob]) -> list[ResponseOutputItem]:
    items: list[ResponseOutputItem] = []
    if parsed.reasoning:  # the thinking first, as OpenAI's reasoning models return it
        items.append(_reasoning_item(reasoning_id(msg_id), parsed.reasoning, "completed"))
    if parsed.content or not parsed.calls:
        text = ResponseOutputText(type="output_text", text=parsed.content, annotations=[], logprobs=logprobs)
        items.append(ResponseOutputMessage(type="message", id=msg_id, status="completed", role="assistant", content=[text]))
    for call in parsed.calls:
        call_id = call.id or f"call_{secrets.token_hex(12)}"
        if call.name in freeform:
            raw = call.arguments.get("input", "") if isinstance(call.arguments, dict) else call.arguments
            # ``status`` is not in the SDK's type; codex reads it, as it reads a function call's
            items.append(ResponseCustomToolCall(type="custom_tool_call", id=f"ctc_{secrets.token_hex(12)}", call_id=call_id,
                                                name=call.name, input=str(raw), status="completed"))
        else:
            namespace = {"namespace": namespace_of[call.name]} if call.name in namespace_of else {}
            items.append(ResponseFunctionToolCall(type="function_call", id=f"fc_{secrets.token_hex(12)}", call_id=call_id,
                                                  name=call.name, arguments=arguments_json(call), status="completed", **namespace))
    return items


def reasoning_id(msg_id: str) -> str:
    return "rs_" + msg_id.removeprefix("msg_")


def _reasoning_item(item_id: str, text: str, status: str) -> ResponseReasoningItem:
    content = [ReasoningContent(type="reasoning_text", text=text)] if text else []
    return ResponseReasoningItem(type="reasoning", id=item_id, summary=[], content=content, status=status)


def _output_format(req: ResponsesRequest) -> dict[str, Any] | None:
    fmt = req.text.format if req.text is not None else None
    if fmt is None:
        return None
    if fmt.type == "json_schema":
        if not fmt.name or fmt.schema_ is None:
            raise APIError(400, "text.format: a json_schema format needs a name and a schema", param="text.format")
        return output_format("json_schema", name=fmt.name, schema=fmt.schema_, strict=fmt.strict)
    return output_format(fmt.type)


MAX_KEPT = 64  # responses a session keeps to be continued from; older ones are forgotten (then a 404)


@dataclass(frozen=True)
class Kept:
    """What continuing from a kept response takes: the full input it was made from (its own
    previous response expanded) and its output items as input items. ``instructions``: its own
    (kept for the record; a continuation does not inherit them)."""

    input: tuple[dict[str, Any], ...]
    output: tuple[dict[str, Any], ...]
    instructions: str | None


def not_found(response_id: str) -> JSONResponse:
    """OpenAI's answer to a ``previous_response_id`` it does not hold."""
    return JSONResponse({"error": {"message": f"Previous response with id {response_id!r} not found.", "type": "invalid_request_error",
                                   "param": "previous_response_id", "code": "previous_response_not_found"}}, status_code=404)


async def _conversation(request: Request, req: ResponsesRequest) -> tuple[list[dict[str, Any]], int] | None:
    """The items to render and where the request's own begin: with ``previous_response_id``, the
    kept response's input and output first (None: this session kept no such response)."""
    own = input_items(req)
    if req.previous_response_id is None:
        return own, 0
    kept = (await session_of(request)).responses.get(req.previous_response_id)
    if kept is None:
        return None
    return [*kept.input, *kept.output, *own], len(kept.input) + len(kept.output)


def _as_input(item: ResponseOutputItem) -> dict[str, Any]:
    """An output item as a client sends it back in ``input`` (the text's logprobs left out)."""
    data = wire_json(item)
    for part in data.get("content") or []:
        if isinstance(part, dict):
            part.pop("logprobs", None)
    return data


def _keep(session: Session, req: ResponsesRequest, items: list[dict[str, Any]], body: Response) -> None:
    """Keep an answered response in its session (unless ``store: false``), the oldest past :data:`MAX_KEPT` forgotten."""
    if req.store is False:
        return
    kept = session.responses
    kept[body.id] = Kept(tuple(items), tuple(_as_input(item) for item in body.output), req.instructions)
    while len(kept) > MAX_KEPT:
        kept.pop(next(iter(kept)))


@router.post("/v1/responses", openapi_extra=body_schema(ResponsesRequest))
@router.post("/s/{session}/v1/responses", openapi_extra=body_schema(ResponsesRequest))
async def responses(request: Request):
    raw = await read_json(request)
    req: ResponsesRequest = validate(ResponsesRequest, raw)
    tools, namespace_of, freeform = to_tools(req)
    choice, forced = None, None
    if isinstance(req.tool_choice, str):
        choice = req.tool_choice
    elif isinstance(req.tool_choice, dict):
        forced = req.tool_choice.get("name")
        if not isinstance(forced, str) or forced not in {t.name for t in tools}:
            raise APIError(400, f"tool_choice: names {forced!r}, which is not in tools", param="tool_choice")
    params = sampling(max_tokens=req.max_output_tokens, temperature=req.temperature, top_p=req.top_p, stop=None, seed=None,
                      top_logprobs=req.top_logprobs if _wants_logprobs(req) else None)
    kw: dict[str, Any] = {"tool_choice": choice, "forced_tool": forced, "raw": raw, "output_format": _output_format(req),
                          "turns_param": "input"}
    conversation = await _conversation(request, req)
    if conversation is None:
        return not_found(str(req.previous_response_id))
    items, first = conversation
    turns = to_turns(req, items, first)
    if req.stream:
        prepared = await prepare(request, turns, tools, params, **kw)
        return StreamingResponse(_live(request, prepared, req, namespace_of, freeform, items), media_type="text/event-stream")
    gen = await generate(request, turns, tools, params, **kw)
    body = _final(req, gen, namespace_of, freeform, params, rid=f"resp_{secrets.token_hex(12)}", created_at=int(time.time()),
                  msg_id=f"msg_{secrets.token_hex(12)}", logprobs=_logprobs(request, req, gen.outputs[0]))
    response = JSONResponse(_json(body))
    await commit(request, gen)
    _keep(gen.session, req, items, body)
    return response


def _json(model: BaseModel) -> dict[str, Any]:
    """A Response, or an event, as JSON. OpenAI sends ``created_at`` as whole seconds; the SDK types
    it float, whose dump would say ``1700000000.0`` (a client that reads an integer refuses that)."""
    data = wire_json(model)
    response = data.get("response", data)
    if isinstance(response.get("created_at"), float):
        response["created_at"] = int(response["created_at"])
    return data


def _tool_choice(req: ResponsesRequest, freeform: set[str]) -> Any:
    """The request's tool choice, as the response says it: a name as the SDK's named choice."""
    if isinstance(req.tool_choice, dict):
        name = req.tool_choice["name"]
        return ToolChoiceCustom(type="custom", name=name) if name in freeform else ToolChoiceFunction(type="function", name=name)
    return req.tool_choice or "auto"


def _response(req: ResponsesRequest, freeform: set[str], **fields: Any) -> Response:
    """The Response envelope. Built with the SDK's own lenient constructor (``construct``, what its
    client does with a body), as it carries the client's tools back as they were sent; its output
    items and usage are validated SDK models."""
    return Response.construct(object="response", model=req.model, parallel_tool_calls=True, tool_choice=_tool_choice(req, freeform),
                              tools=req.tools or [], error=None, instructions=req.instructions,
                              previous_response_id=req.previous_response_id, **fields)


def _usage(gen: Generated) -> ResponseUsage:
    """A response's ``usage``: its one sample's output tokens; no caching, no reasoning tokens."""
    n_prompt, n_output = len(gen.prompt_ids), len(gen.outputs[0].output_ids)
    return ResponseUsage(input_tokens=n_prompt, input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
                         output_tokens=n_output, output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
                         total_tokens=n_prompt + n_output)


def _final(req: ResponsesRequest, gen: Generated, namespace_of: dict[str, str], freeform: set[str], params: SamplingParams, *,
           rid: str, created_at: int, msg_id: str, logprobs: list[Logprob]) -> Response:
    """The finished response (``completed``, or ``incomplete`` when the answer ran out of tokens);
    ``params``: the temperature and top_p it reports; ``logprobs``: its text's, when included."""
    out, parsed = gen.outputs[0], gen.parsed[0]
    incomplete = out.finish_reason == "length" and not parsed.calls
    return _response(req, freeform, id=rid, created_at=created_at, status="incomplete" if incomplete else "completed",
                     incomplete_details=IncompleteDetails(reason="max_output_tokens") if incomplete else None,
                     output=_output_items(parsed, namespace_of, freeform, msg_id, logprobs), usage=_usage(gen),
                     temperature=params.temperature, top_p=params.top_p, max_output_tokens=req.max_output_tokens)


async def _live(request: Request, prepared: Any, req: ResponsesRequest, namespace_of: dict[str, str],
                freeform: set[str], conversation: list[dict[str, Any]]) -> AsyncIterator[str]:
    """The Responses event sequence: output text streamed as the engine samples it, calls at the end
    (``conversation``: the full input, kept with the response once it is generated)."""
    seq = itertools.count()

    def event(model: BaseModel) -> str:
        return sse(_json(model), model.type)  # type: ignore[attr-defined]  # every event has its type

    rid, created_at, msg_id = f"resp_{secrets.token_hex(12)}", int(time.time()), f"msg_{secrets.token_hex(12)}"
    pending = _response(req, freeform, id=rid, created_at=created_at, status="in_progress", output=[], usage=None,
                        incomplete_details=None)
    yield event(ResponseCreatedEvent(type="response.created", sequence_number=next(seq), response=pending))
    yield event(ResponseInProgressEvent(type="response.in_progress", sequence_number=next(seq), response=pending))

    rs_id = reasoning_id(msg_id)
    at = 0  # the message's output index: 1 after a reasoning item

    def opened() -> list[str]:  # the message item and its text part, before any text
        item = ResponseOutputMessage(type="message", id=msg_id, status="in_progress", role="assistant", content=[])
        part = ResponseOutputText(type="output_text", text="", annotations=[])
        return [event(ResponseOutputItemAddedEvent(type="response.output_item.added", sequence_number=next(seq), output_index=at,
                                                   item=item)),
                event(ResponseContentPartAddedEvent(type="response.content_part.added", sequence_number=next(seq), item_id=msg_id,
                                                    output_index=at, content_index=0, part=part))]

    def closed_reasoning(thought: str) -> list[str]:  # the reasoning item, done: before the message
        return [event(ResponseReasoningTextDoneEvent(type="response.reasoning_text.done", sequence_number=next(seq), item_id=rs_id,
                                                     output_index=0, content_index=0, text=thought)),
                event(ResponseOutputItemDoneEvent(type="response.output_item.done", sequence_number=next(seq), output_index=0,
                                                  item=_reasoning_item(rs_id, thought, "completed")))]

    text, thought, thinking_open, gen = "", "", False, None
    async for kind, value in stream(request, prepared):
        if kind == "done":
            gen = value
            continue
        if kind == "reasoning":
            if text:
                continue  # thinking after the text began (a parser's final trim): the item is closed
            if not thinking_open:
                thinking_open, at = True, 1
                yield event(ResponseOutputItemAddedEvent(type="response.output_item.added", sequence_number=next(seq), output_index=0,
                                                         item=_reasoning_item(rs_id, "", "in_progress")))
            thought += value
            yield event(ResponseReasoningTextDeltaEvent(type="response.reasoning_text.delta", sequence_number=next(seq), item_id=rs_id,
                                                        output_index=0, content_index=0, delta=value))
            continue
        if thinking_open and not text:
            for line in closed_reasoning(thought):
                yield line
        if not text:
            for line in opened():
                yield line
        text += value
        yield event(ResponseTextDeltaEvent(type="response.output_text.delta", sequence_number=next(seq), item_id=msg_id,
                                           output_index=at, content_index=0, delta=value, logprobs=[]))
    if thinking_open and not text:
        for line in closed_reasoning(thought):
            yield line
    logprobs = _logprobs(request, req, gen.outputs[0])
    body = _final(req, gen, namespace_of, freeform, prepared.params, rid=rid, created_at=created_at, msg_id=msg_id,
                  logprobs=logprobs)
    _keep(prepared.session, req, conversation, body)  # recorded already (stream); kept before its last events go out
    items = body.output
    message = next((item for item in items if isinstance(item, ResponseOutputMessage)), None)
    if message is not None:
        at = items.index(message)
        final_text = message.content[0].text
        if not text:  # nothing streamed (an empty answer): open the item now
            for line in opened():
                yield line
        yield event(ResponseTextDoneEvent(type="response.output_text.done", sequence_number=next(seq), item_id=msg_id, output_index=at,
                                          content_index=0, text=final_text, logprobs=_done_logprobs(logprobs)))
        yield event(ResponseContentPartDoneEvent(type="response.content_part.done", sequence_number=next(seq), item_id=msg_id,
                                                 output_index=at, content_index=0,
                                                 part=ResponseOutputText(type="output_text", text=final_text, annotations=[],
                                                                         **({"logprobs": logprobs} if logprobs else {}))))
        yield event(ResponseOutputItemDoneEvent(type="response.output_item.done", sequence_number=next(seq), output_index=at,
                                                item=message))
    for index, item in enumerate(items):
        if isinstance(item, ResponseFunctionToolCall):
            args = item.arguments
            yield event(ResponseOutputItemAddedEvent(type="response.output_item.added", sequence_number=next(seq), output_index=index,
                                                     item=item.model_copy(update={"status": "in_progress", "arguments": ""})))
            for i in range(0, len(args), 24):
                yield event(ResponseFunctionCallArgumentsDeltaEvent(type="response.function_call_arguments.delta",
                                                                    sequence_number=next(seq), item_id=item.id, output_index=index,
                                                                    delta=args[i : i + 24]))
            yield event(ResponseFunctionCallArgumentsDoneEvent(type="response.function_call_arguments.done", sequence_number=next(seq),
                                                               item_id=item.id, output_index=index, arguments=args))
        elif isinstance(item, ResponseCustomToolCall):
            raw_input = item.input
            opening = ResponseCustomToolCall(type="custom_tool_call", id=item.id, call_id=item.call_id, name=item.name, input="",
                                             status="in_progress")
            yield event(ResponseOutputItemAddedEvent(type="response.output_item.added", sequence_number=next(seq), output_index=index,
                                                     item=opening))
            for i in range(0, len(raw_input), 24):
                yield event(ResponseCustomToolCallInputDeltaEvent(type="response.custom_tool_call_input.delta",
                                                                  sequence_number=next(seq), item_id=item.id, output_index=index,
                                                                  delta=raw_input[i : i + 24]))
            yield event(ResponseCustomToolCallInputDoneEvent(type="response.custom_tool_call_input.done", sequence_number=next(seq),
                                                             item_id=item.id, output_index=index, input=raw_input))
        else:
            continue
        yield event(ResponseOutputItemDoneEvent(type="response.output_item.done", sequence_number=next(seq), output_index=index,
                                                item=item))
    if body.status == "incomplete":
        yield event(ResponseIncompleteEvent(type="response.incomplete", sequence_number=next(seq), response=body))
    else:
        yield event(ResponseCompletedEvent(type="response.completed", sequence_number=next(seq), response=body))

"""``POST /v1/responses`` (stateless; what codex and the openai-agents SDK speak), stream and not.

Input items: ``message`` (developer/system/user/assistant), ``function_call`` /
``function_call_output``, ``custom_tool_call`` / ``custom_tool_call_output``; ``reasoning``
items are skipped. Tools: ``function`` (incl. ``strict``), ``custom`` (freeform text input),
``namespace`` (nested functions); hosted tools (web_search, tool_search, …) are ignored.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from forge_cli.gateway.errors import APIError, sse
from forge_cli.gateway.openapi import body_schema
from forge_cli.gateway.protocol.responses import ResponsesRequest
from forge_cli.gateway.protocol.types import output_format
from forge_cli.gateway.render import Tool, Turn, arguments_json
from forge_cli.gateway.routes.common import commit, generate, prepare, read_json, sampling, stream, validate
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


def to_turns(req: ResponsesRequest) -> list[Turn]:
    turns: list[Turn] = []
    if req.instructions:
        turns.append(Turn("system", req.instructions))
    items = [{"type": "message", "role": "user", "content": req.input}] if isinstance(req.input, str) else req.input
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type", "message" if "role" in item else None)
        if not isinstance(kind, (str, type(None))) or not isinstance(item.get("role", ""), str):
            raise APIError(400, f"{where}: 'type' and 'role' must be strings", param=where)
        if kind == "message":
            role = {"developer": "system"}.get(item.get("role"), item.get("role"))
            if role not in ("system", "user", "assistant"):
                raise APIError(400, f"{where}.role: must be developer, system, user or assistant (got {item.get('role')!r})", param=where)
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
            if turns and turns[-1].role == "assistant":  # parallel calls join one assistant turn
                turns[-1].tool_calls.append(call)
            else:
                turns.append(Turn("assistant", "", [call]))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output", "")
            turns.append(Turn("tool", output if isinstance(output, str) else _content(output, f"{where}.output")))
        elif kind in ("reasoning", "item_reference", "compaction"):
            continue
        else:
            raise APIError(400, f"{where}.type: input item type {kind!r} is not supported", param=where)
    return turns


def _output_items(parsed: Any, namespace_of: dict[str, str], freeform: set[str]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if parsed.content or not parsed.calls:
        items.append({"type": "message", "id": f"msg_{secrets.token_hex(12)}", "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": parsed.content, "annotations": [], "logprobs": []}]})
    for call in parsed.calls:
        call_id = f"call_{secrets.token_hex(12)}"
        if call.name in freeform:
            raw = call.arguments.get("input", "") if isinstance(call.arguments, dict) else call.arguments
            items.append({"type": "custom_tool_call", "id": f"ctc_{secrets.token_hex(12)}", "call_id": call_id, "name": call.name,
                          "input": str(raw), "status": "completed"})
        else:
            item = {"type": "function_call", "id": f"fc_{secrets.token_hex(12)}", "call_id": call_id, "name": call.name,
                    "arguments": arguments_json(call), "status": "completed"}
            if call.name in namespace_of:
                item["namespace"] = namespace_of[call.name]
            items.append(item)
    return items


def _output_format(req: ResponsesRequest) -> dict[str, Any] | None:
    fmt = req.text.format if req.text is not None else None
    if fmt is None:
        return None
    if fmt.type == "json_schema":
        if not fmt.name or fmt.schema_ is None:
            raise APIError(400, "text.format: a json_schema format needs a name and a schema", param="text.format")
        return output_format("json_schema", name=fmt.name, schema=fmt.schema_, strict=fmt.strict)
    return output_format(fmt.type)


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
    params = sampling(max_tokens=req.max_output_tokens, temperature=req.temperature, top_p=req.top_p, stop=None, seed=None)
    kw: dict[str, Any] = {"tool_choice": choice, "forced_tool": forced, "raw": raw, "output_format": _output_format(req),
                          "turns_param": "input"}
    if req.stream:
        prepared = await prepare(request, to_turns(req), tools, params, **kw)
        return StreamingResponse(_live(request, prepared, req, namespace_of, freeform), media_type="text/event-stream")
    gen = await generate(request, to_turns(req), tools, params, **kw)
    response = JSONResponse(_body(req, gen, namespace_of, freeform, params))
    await commit(request, gen)
    return response


def _body(req: ResponsesRequest, gen: Any, namespace_of: dict[str, str], freeform: set[str], params: Any) -> dict[str, Any]:
    out, parsed = gen.outputs[0], gen.parsed[0]
    incomplete = out.finish_reason == "length" and not parsed.calls
    body = {
        "id": f"resp_{secrets.token_hex(12)}", "object": "response", "created_at": int(time.time()),
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "model": req.model, "output": _output_items(parsed, namespace_of, freeform),
        "parallel_tool_calls": True, "tool_choice": req.tool_choice or "auto", "tools": req.tools or [],
        "usage": {"input_tokens": len(gen.prompt_ids), "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": len(out.output_ids), "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": len(gen.prompt_ids) + len(out.output_ids)},
        "error": None, "instructions": req.instructions, "temperature": params.temperature, "top_p": params.top_p,
        "max_output_tokens": req.max_output_tokens,
    }
    return body


async def _live(request: Request, prepared: Any, req: ResponsesRequest, namespace_of: dict[str, str],
                freeform: set[str]) -> AsyncIterator[str]:
    """The Responses event sequence: output text streamed as the engine samples it, calls at the end."""
    seq = 0

    def event(kind: str, **fields: Any) -> str:
        nonlocal seq
        seq += 1
        return sse({"type": kind, "sequence_number": seq - 1, **fields}, kind)

    rid = f"resp_{secrets.token_hex(12)}"
    pending = {"id": rid, "object": "response", "created_at": int(time.time()), "status": "in_progress", "model": req.model,
               "output": [], "usage": None, "error": None, "incomplete_details": None, "instructions": req.instructions,
               "tools": req.tools or [], "tool_choice": req.tool_choice or "auto", "parallel_tool_calls": True}
    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    msg_id, text, gen = f"msg_{secrets.token_hex(12)}", "", None
    async for kind, value in stream(request, prepared):
        if kind == "done":
            gen = value
            continue
        if not text:
            item = {"type": "message", "id": msg_id, "status": "in_progress", "role": "assistant", "content": []}
            yield event("response.output_item.added", output_index=0, item=item)
            yield event("response.content_part.added", item_id=msg_id, output_index=0, content_index=0,
                        part={"type": "output_text", "text": "", "annotations": []})
        text += value
        yield event("response.output_text.delta", item_id=msg_id, output_index=0, content_index=0, delta=value, logprobs=[])
    body = _body(req, gen, namespace_of, freeform, prepared.params)
    body["id"] = rid
    items = body["output"]
    if items and items[0]["type"] == "message":
        items[0]["id"] = msg_id
        final_text = items[0]["content"][0]["text"]
        if not text:  # nothing streamed (an empty answer): open the item now
            yield event("response.output_item.added", output_index=0, item={**items[0], "status": "in_progress", "content": []})
            yield event("response.content_part.added", item_id=msg_id, output_index=0, content_index=0,
                        part={"type": "output_text", "text": "", "annotations": []})
        yield event("response.output_text.done", item_id=msg_id, output_index=0, content_index=0, text=final_text, logprobs=[])
        yield event("response.content_part.done", item_id=msg_id, output_index=0, content_index=0,
                    part={"type": "output_text", "text": final_text, "annotations": []})
        yield event("response.output_item.done", output_index=0, item=items[0])
    for index, item in enumerate(items):
        if item["type"] == "message":
            continue
        if item["type"] == "function_call":
            args = item["arguments"]
            yield event("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "arguments": ""})
            for i in range(0, len(args), 24):
                yield event("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=args[i : i + 24])
            yield event("response.function_call_arguments.done", item_id=item["id"], output_index=index, arguments=args)
        else:  # custom_tool_call
            raw_input = item["input"]
            yield event("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "input": ""})
            for i in range(0, len(raw_input), 24):
                yield event("response.custom_tool_call_input.delta", item_id=item["id"], output_index=index, delta=raw_input[i : i + 24])
            yield event("response.custom_tool_call_input.done", item_id=item["id"], output_index=index, input=raw_input)
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.incomplete" if body["status"] == "incomplete" else "response.completed", response=body)

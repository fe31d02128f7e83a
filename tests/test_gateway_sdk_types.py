"""Every body and every stream event of the four APIs is the OpenAI or Anthropic SDK's own type.

Each response is read as raw JSON (``httpx``, not a client that forgives) and validated against the
SDK's pydantic type in strict mode: the discriminator (``object``/``type``, and the SSE event name)
picks the type it claims, no key anywhere is one the type does not name (:func:`unknown_keys`), and
the SDK's own dump of what it parsed is what was sent. Streamed and not, ``n > 1``, tool calls,
logprobs; and the two inconsistencies a real-client check found: a streamed response keeps its
``created_at``, and the streamed chat usage is the non-streamed one.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from anthropic.types import Message, MessageTokensCount, RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.completion import Completion
from openai.types.responses import Response, ResponseCustomToolCall, ResponseStreamEvent
from pydantic import BaseModel, TypeAdapter

from tests.test_gateway_apis import stack  # noqa: F401  # the live gateway of a scripted policy (a fixture)

# keys the gateway sends that the SDK's type does not name, each on purpose
KNOWN_EXTRAS = {(ResponseCustomToolCall, "status")}  # codex reads a custom tool call's status, as it reads a function call's

BASH = {"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                          "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}
BASH_CALL = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>'
WEATHER = {"name": "get_weather", "description": "Weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
RESPONSES_TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather.", "strict": True,
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}},
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch (freeform)."},
    {"type": "namespace", "name": "files", "description": "File tools.",
     "tools": [{"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]},
    {"type": "web_search"},
]
PATCH_CALL = '<tool_call>\n{"name": "apply_patch", "arguments": {"input": "*** Begin Patch"}}\n</tool_call>'
READ_CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "README.md"}}\n</tool_call>'


# ---- strict validation against the SDK's types ------------------------------------------------------


def unknown_keys(value: Any, path: str = "$") -> list[str]:
    """Where a parsed SDK model holds a key its type does not name (the SDKs keep such keys as extras)."""
    found = []
    if isinstance(value, BaseModel):
        found += [f"{path}.{key}" for key in (value.model_extra or {}) if (type(value), key) not in KNOWN_EXTRAS]
        for name in type(value).model_fields:
            found += unknown_keys(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found += unknown_keys(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            found += unknown_keys(item, f"{path}.{key}")
    return found


def conforms(kind: Any, data: dict[str, Any]) -> Any:
    """``data`` as the SDK type ``kind`` (a model or a union), validated strictly; fails the test on any
    difference: a value of the wrong JSON type, a key the type does not name, a dump that is not ``data``."""
    parsed = TypeAdapter(kind).validate_json(json.dumps(data), strict=True)
    assert unknown_keys(parsed) == [], data
    assert parsed.to_dict(mode="json") == data  # what the SDK makes of it is exactly what was sent
    return parsed


def post(live, path: str, body: dict[str, Any], key: str) -> httpx.Response:
    r = httpx.post(f"{live.url}{path}", json=body, headers={"Authorization": f"Bearer {key}", "x-api-key": key}, timeout=60)
    assert r.status_code == 200, r.text[:500]
    return r


def events(r: httpx.Response) -> list[tuple[str | None, Any]]:
    """The SSE stream as (event name, data); the data of ``[DONE]`` is the string."""
    out = []
    for block in r.text.split("\n\n"):
        if not block.strip():
            continue
        name, data = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data = line[len("data: "):]
        assert data is not None, block
        out.append((name, data if data == "[DONE]" else json.loads(data)))
    return out


# ---- chat completions -------------------------------------------------------------------------------


@pytest.mark.parametrize("n, tools, logprobs", [(1, False, False), (2, False, True), (1, True, True), (3, True, False)])
def test_chat_completion_bodies(stack, n, tools, logprobs):
    live, replies, _ = stack
    replies.queue.extend([f"Let me look.\n{BASH_CALL}" if tools else "Hello there."] * n)
    body: dict[str, Any] = {"model": "forge", "messages": [{"role": "user", "content": "hi"}], "n": n, "max_tokens": 64}
    if tools:
        body["tools"] = [BASH]
    if logprobs:
        body |= {"logprobs": True, "top_logprobs": 2}
    data = post(live, "/v1/chat/completions", body, f"chat-{n}-{tools}-{logprobs}").json()
    completion = conforms(ChatCompletion, data)
    assert completion.object == "chat.completion" and len(completion.choices) == n
    assert completion.usage.prompt_tokens_details.cached_tokens == 0
    for choice in completion.choices:
        assert (choice.finish_reason == "tool_calls") == tools and (choice.logprobs is not None) == logprobs
        if tools:
            assert choice.message.tool_calls[0].type == "function" and choice.message.tool_calls[0].function.name == "bash"
        if logprobs:
            assert all(len(entry.top_logprobs) == 2 for entry in choice.logprobs.content)


@pytest.mark.parametrize("n, tools, logprobs", [(1, False, True), (1, True, False), (2, True, True)])
def test_chat_completion_chunks(stack, n, tools, logprobs):
    """Every chunk is a ChatCompletionChunk; the usage chunk is the non-streamed usage, details and all."""
    live, replies, _ = stack
    body: dict[str, Any] = {"model": "forge", "messages": [{"role": "user", "content": "hi"}], "n": n, "max_tokens": 64,
                            "stream_options": {"include_usage": True}}
    if tools:
        body["tools"] = [BASH]
    if logprobs:
        body |= {"logprobs": True, "top_logprobs": 2}
    reply = f"Let me look.\n{BASH_CALL}" if tools else "Hello there, streamed."
    replies.queue.extend([reply] * n)
    unstreamed = conforms(ChatCompletion, post(live, "/v1/chat/completions", body, f"chunks-{n}-{tools}-{logprobs}").json())
    replies.queue.extend([reply] * n)
    stream = events(post(live, "/v1/chat/completions", body | {"stream": True}, f"chunks-{n}-{tools}-{logprobs}-s"))
    assert stream[-1] == (None, "[DONE]")
    chunks = [conforms(ChatCompletionChunk, data) for _, data in stream[:-1]]
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id and c.created == chunks[0].created for c in chunks)
    *per_choice, last = chunks
    assert last.choices == [] and last.usage.model_dump() == unstreamed.usage.model_dump()
    assert all(c.usage is None for c in per_choice) and "usage" in stream[0][1]  # include_usage: null on every other chunk
    for i in range(n):
        mine = [c.choices[0] for c in per_choice if c.choices[0].index == i]
        assert mine[0].delta.role == "assistant" and mine[-1].finish_reason == unstreamed.choices[i].finish_reason
        assert "".join(c.delta.content or "" for c in mine) == (unstreamed.choices[i].message.content or "")
        if tools:
            calls = [call for c in mine for call in c.delta.tool_calls or []]
            assert calls[0].function.name == "bash" and calls[0].type == "function"
            assert json.loads("".join(call.function.arguments for call in calls)) == {"command": "ls -la"}
        assert (mine[-1].logprobs is not None) == logprobs


# ---- legacy completions -----------------------------------------------------------------------------


def test_completion_body_and_chunks(stack):
    live, replies, _ = stack
    body = {"model": "forge", "prompt": "hello ", "max_tokens": 32, "n": 2, "logprobs": 2, "echo": True}
    replies.queue.extend(["world", "there"])
    completion = conforms(Completion, post(live, "/v1/completions", body, "legacy").json())
    assert completion.object == "text_completion" and [c.text for c in completion.choices] == ["hello world", "hello there"]
    assert all(len(c.logprobs.top_logprobs) == len(c.logprobs.tokens) for c in completion.choices)
    replies.queue.extend(["a longer answer than sixteen characters", "short"])
    stream = events(post(live, "/v1/completions", body | {"stream": True}, "legacy-s"))
    assert stream[-1] == (None, "[DONE]")
    texts: dict[int, str] = {0: "", 1: ""}
    for _, data in stream[:-1]:
        [choice] = data["choices"]
        if choice["finish_reason"] is None:  # OpenAI streams null; the SDK's type admits no null (its client parses leniently)
            data = {**data, "choices": [{**choice, "finish_reason": "stop"}]}
        chunk = conforms(Completion, data)
        assert chunk.object == "text_completion" and chunk.usage is None
        texts[choice["index"]] += choice["text"]
    assert texts == {0: "hello a longer answer than sixteen characters", 1: "hello short"}


# ---- Anthropic messages -----------------------------------------------------------------------------


@pytest.mark.parametrize("reply", [f"I will check.\n{WEATHER_CALL}", "It is sunny.", ""])
def test_message_body_and_events(stack, reply):
    live, replies, _ = stack
    body = {"model": "forge", "max_tokens": 128, "tools": [WEATHER], "messages": [{"role": "user", "content": "Weather in Paris?"}]}
    replies.queue.append(reply)
    message = conforms(Message, post(live, "/v1/messages", body, f"msg-{len(reply)}").json())
    assert message.type == "message" and message.role == "assistant"
    assert message.usage.input_tokens > 0 and message.usage.cache_read_input_tokens == 0
    replies.queue.append(reply)
    stream = events(post(live, "/v1/messages", body | {"stream": True}, f"msg-{len(reply)}-s"))
    parsed = []
    for name, data in stream:
        event = conforms(RawMessageStreamEvent, data)
        assert event.type == name  # the SSE event name is the event's type
        parsed.append(event)
    kinds = [e.type for e in parsed]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert parsed[0].message.usage.model_dump() == message.usage.model_copy(update={"output_tokens": 0}).model_dump()
    blocks = [e.content_block.type for e in parsed if e.type == "content_block_start"]
    assert blocks == [b.type for b in message.content]
    assert parsed[-2].delta.stop_reason == message.stop_reason and parsed[-2].usage.output_tokens == message.usage.output_tokens
    counted = conforms(MessageTokensCount, post(live, "/v1/messages/count_tokens", body, f"msg-{len(reply)}").json())
    assert counted.input_tokens == message.usage.input_tokens


# ---- Responses --------------------------------------------------------------------------------------


@pytest.mark.parametrize("reply, kind", [(f"Checking.\n{WEATHER_CALL}", "function_call"), (PATCH_CALL, "custom_tool_call"),
                                         (READ_CALL, "function_call"), ("Plain text.", "message")])
def test_response_body_and_events(stack, reply, kind):
    """The body and each event conform; a streamed response keeps its id and ``created_at`` (whole
    seconds, as OpenAI sends them) from ``response.created`` to ``response.completed``."""
    live, replies, _ = stack
    body = {"model": "forge", "input": "Weather in Paris?", "instructions": "Be useful.", "tools": RESPONSES_TOOLS,
            "max_output_tokens": 128}
    if kind == "custom_tool_call":
        body["tool_choice"] = {"type": "custom", "name": "apply_patch"}
    replies.queue.append(reply)
    data = post(live, "/v1/responses", body, f"resp-{kind}-{len(reply)}").json()
    response = conforms(Response, data)
    assert response.object == "response" and response.status == "completed" and isinstance(data["created_at"], int)
    assert response.output[-1].type == kind
    if reply == READ_CALL:
        assert response.output[-1].namespace == "files"
    replies.queue.append(reply)
    stream = events(post(live, "/v1/responses", body | {"stream": True}, f"resp-{kind}-{len(reply)}-s"))
    parsed = []
    for name, event_data in stream:
        event = conforms(ResponseStreamEvent, event_data)
        assert event.type == name
        parsed.append(event)
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    created, completed = parsed[0], parsed[-1]
    assert created.type == "response.created" and completed.type == "response.completed"
    assert created.response.id == completed.response.id and created.response.created_at == completed.response.created_at
    assert isinstance(stream[0][1]["response"]["created_at"], int) and isinstance(stream[-1][1]["response"]["created_at"], int)
    assert [item.type for item in completed.response.output] == [item.type for item in response.output]
    assert completed.response.usage.model_dump() == response.usage.model_dump()


def test_response_incomplete(stack):
    live, replies, _ = stack
    body = {"model": "forge", "input": "Talk.", "max_output_tokens": 2}
    replies.queue.append("a reply much longer than two tokens")
    response = conforms(Response, post(live, "/v1/responses", body, "resp-short").json())
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    replies.queue.append("a reply much longer than two tokens")
    stream = events(post(live, "/v1/responses", body | {"stream": True}, "resp-short-s"))
    last = conforms(ResponseStreamEvent, stream[-1][1])
    assert last.type == stream[-1][0] == "response.incomplete" and last.response.status == "incomplete"

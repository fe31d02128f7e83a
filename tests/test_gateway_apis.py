"""/v1/messages (anthropic SDK), /v1/responses (openai SDK), /v1/completions, and the requests
seven real agent programs sent (tests/fixtures/agent_requests), replayed against the gateway."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx
import pytest

from forge_cli.engine.scripted import ScriptedEngine
from forge_cli.gateway.state import GatewayState
from forge_cli.pool.store import DataPool
from tests.conftest import LiveGateway, tool_formats
from tests.test_gateway_chat import Replies

FIXTURES = Path(__file__).parent / "fixtures" / "agent_requests"
WEATHER = {"name": "get_weather", "description": "Weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def stack(tiny_model, tmp_path_factory):
    replies = Replies()
    engine = ScriptedEngine(tiny_model, replies)
    pool = DataPool.sqlite(tmp_path_factory.mktemp("gw") / "pool.sqlite")
    live = LiveGateway(GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool))
    yield live, replies, pool
    live.stop()
    pool.close()


def recorded(stack, key):
    live, _, pool = stack
    return pool.trajectory(live.state.sessions[live.state.by_key[key]].trajectory_id).completions


def claude(live, key):
    return anthropic.Anthropic(base_url=live.url, api_key=key, max_retries=0)


def test_messages_text_and_tool_use(stack):
    live, replies, _ = stack
    client = claude(live, "a-1")
    replies.queue.append(f"I will check.\n{CALL}")
    r = client.messages.create(model="forge", max_tokens=128, system=[{"type": "text", "text": "You help.", "cache_control": {"type": "ephemeral"}}],
                               tools=[WEATHER], messages=[{"role": "user", "content": "Weather in Paris?"}],
                               metadata={"user_id": "u"}, extra_query={"beta": "true"})
    assert r.stop_reason == "tool_use"
    assert r.content[0].type == "text" and r.content[0].text == "I will check."
    assert r.content[1].type == "tool_use" and r.content[1].name == "get_weather" and r.content[1].input == {"city": "Paris"}
    replies.queue.append("It is sunny.")
    r2 = client.messages.create(model="forge", max_tokens=128, tools=[WEATHER], messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "text", "text": "I will check."},
                                          {"type": "tool_use", "id": r.content[1].id, "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": r.content[1].id, "content": "sunny, 21 C"}]},
        {"role": "system", "content": "A reminder in the middle."},
    ])
    assert r2.stop_reason == "end_turn" and r2.content[0].text == "It is sunny."
    first, second = recorded(stack, "a-1")
    tok = live.state.tokenizer
    prompt = tok.decode(second.prompt_ids)
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in prompt and "A reminder in the middle." in prompt
    assert tok.decode(first.output_ids[:-1]) == f"I will check.\n{CALL}"


def test_messages_stream_events(stack):
    live, replies, _ = stack
    replies.queue.append(f"Looking.\n{CALL}")
    with claude(live, "a-2").messages.stream(model="forge", max_tokens=128, tools=[WEATHER],
                                             messages=[{"role": "user", "content": "Weather?"}]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_delta" in kinds and "message_delta" in kinds
    assert final.content[1].input == {"city": "Paris"} and final.stop_reason == "tool_use"


def test_messages_errors_in_anthropic_shape(stack):
    live, _, _ = stack
    r = httpx.post(f"{live.url}/v1/messages", headers={"x-api-key": "a-3"}, json={"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error" and "max_tokens" in body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError):
        claude(live, "a-3").messages.create(model="forge", max_tokens=10, messages=[{"role": "robot", "content": "x"}])


def test_messages_count_tokens(stack):
    """The count is the length of the prompt a call with the same body records, and counting with a
    new key opens no trajectory; unknown /v1/messages paths answer in Anthropic's shape."""
    live, replies, _ = stack
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    sessions = len(live.state.sessions)
    counted = claude(live, "a-count").messages.count_tokens(model="forge", system="You help.", tools=[WEATHER], messages=messages)
    assert len(live.state.sessions) == sessions
    replies.queue.append("Sunny.")
    claude(live, "a-count").messages.create(model="forge", max_tokens=16, system="You help.", tools=[WEATHER], messages=messages)
    [c] = recorded(stack, "a-count")
    assert counted.input_tokens == len(c.prompt_ids) > 0
    missing = httpx.post(f"{live.url}/v1/messages/nowhere", json={})
    assert missing.status_code == 404 and missing.json()["type"] == "error"


def test_responses_function_and_custom_tools(stack):
    live, replies, _ = stack
    client = live.openai("r-1")
    tools = [{"type": "function", "name": "get_weather", "description": "Weather.", "strict": True,
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}},
             {"type": "custom", "name": "apply_patch", "description": "Apply a patch (freeform)."},
             {"type": "web_search"}]
    replies.queue.append(CALL)
    r = client.responses.create(model="forge", instructions="Be useful.", input="Weather in Paris?", tools=tools,
                                store=False, include=["reasoning.encrypted_content"], reasoning={"summary": "auto"},
                                prompt_cache_key="k", parallel_tool_calls=True)
    [call] = [o for o in r.output if o.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    replies.queue.append('<tool_call>\n{"name": "apply_patch", "arguments": {"input": "*** Begin Patch"}}\n</tool_call>')
    r2 = client.responses.create(model="forge", input=[
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "dev note"}]},
        {"type": "message", "role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": call.call_id, "name": "get_weather", "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
    ], tools=tools)
    [custom] = [o for o in r2.output if o.type == "custom_tool_call"]
    assert custom.name == "apply_patch" and custom.input == "*** Begin Patch"
    replies.queue.append("Done.")
    r3 = client.responses.create(model="forge", input=[
        {"type": "custom_tool_call", "call_id": custom.call_id, "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": custom.call_id, "output": "applied"},
    ], tools=tools)
    assert r3.output_text == "Done." and r3.status == "completed"
    prompt = live.state.tokenizer.decode(recorded(stack, "r-1")[1].prompt_ids)
    assert "dev note" in prompt and "<tool_response>\nsunny\n</tool_response>" in prompt


def test_responses_stream_event_sequence(stack):
    live, replies, _ = stack
    replies.queue.append(f"Checking.\n{CALL}")
    events = list(live.openai("r-2").responses.create(model="forge", input="Weather?", stream=True, tools=[
        {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]))
    kinds = [e.type for e in events]
    for kind in ("response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
                 "response.output_text.delta", "response.output_text.done", "response.content_part.done",
                 "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done"):
        assert kind in kinds, kind
    assert kinds[-1] == "response.completed" and events[-1].response.usage.output_tokens > 0
    assert [e.sequence_number for e in events] == list(range(len(events)))


@pytest.mark.parametrize("streamed", [False, True])
def test_responses_include_output_text_logprobs(stack, streamed):
    """``include: ["message.output_text.logprobs"]``: the output text carries each sampled token's
    logprob — the recorded one — with ``top_logprobs`` alternatives; without it, none (as before)."""
    live, replies, _ = stack
    client = live.openai(f"r-lp-{streamed}")
    replies.queue.append("Sunny and warm.")
    kw = {"model": "forge", "input": "Weather?", "include": ["message.output_text.logprobs"], "top_logprobs": 2}
    if streamed:
        events = list(client.responses.create(**kw, stream=True))
        done = next(e for e in events if e.type == "response.output_text.done")
        response = events[-1].response
        assert [(d.token, d.logprob) for d in done.logprobs] == [(lp.token, lp.logprob)
                                                                  for lp in response.output[0].content[0].logprobs]
    else:
        response = client.responses.create(**kw)
    [c] = recorded(stack, f"r-lp-{streamed}")
    logprobs = response.output[0].content[0].logprobs
    assert [lp.logprob for lp in logprobs] == pytest.approx(c.output_logprobs)
    assert "".join(lp.token for lp in logprobs).startswith("Sunny and warm.")
    assert all(len(lp.top_logprobs) == 2 and bytes(lp.bytes).decode("utf-8", "replace") == lp.token for lp in logprobs)
    replies.queue.append("Sunny.")
    plain = client.responses.create(model="forge", input="Weather?")
    assert plain.output[0].content[0].logprobs == []


def test_completions(stack):
    live, replies, _ = stack
    replies.queue.append("world")
    r = live.openai("c-1").completions.create(model="forge", prompt="hello ", max_tokens=8, logprobs=2)
    assert r.choices[0].text == "world"
    [c] = recorded(stack, "c-1")
    assert c.prompt_ids == live.state.tokenizer.encode("hello ", add_special_tokens=False)
    assert r.choices[0].logprobs.token_logprobs == pytest.approx(c.output_logprobs)
    tops = r.choices[0].logprobs.top_logprobs  # legacy shape: {token text: logprob}, the 2 most likely
    assert len(tops) == len(c.output_ids) and all(len(t) == 2 for t in tops)
    assert all(max(t.values()) >= lp - 1e-6 for t, lp in zip(tops, c.output_logprobs))


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.json")))
def test_real_agent_requests_are_accepted(stack, fixture):
    """What opencode, codex, claude-code, mini-swe-agent, aider, openai-agents and smolagents sent."""
    live, _, _ = stack
    captured = json.loads((FIXTURES / fixture).read_text())
    body = captured["body"]
    if isinstance(body.get("tools"), list):  # the capture trimmed some lists to a note string
        body["tools"] = [t for t in body["tools"] if isinstance(t, dict)]
    headers = {"x-api-key": "fx-" + fixture} if "messages" in captured["path"] else {"Authorization": f"Bearer fx-{fixture}"}
    r = httpx.post(f"{live.url}{captured['path']}", json=body, headers=headers, timeout=60)
    assert r.status_code == 200, r.text[:500]
    if body.get("stream"):
        assert r.text.startswith(("data:", "event:"))
    assert len(recorded(stack, "fx-" + fixture)) == 1


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_leaf = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8) | st.sampled_from(
    ["user", "assistant", "system", "tool", "developer", "function", "text", "tool_use", "tool_result", "function_call",
     "function_call_output", "custom", "namespace", "message", "auto", "required", "any", "none", "input_text"])
_json = st.recursive(_leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
    ["role", "content", "type", "text", "name", "arguments", "input", "tools", "function", "parameters", "tool_calls", "id",
     "call_id", "output", "messages", "max_tokens", "stream", "tool_choice", "input_schema", "system", "instructions",
     "prompt", "n", "stop", "temperature", "tool_use_id", "is_error", "max_output_tokens"]), inner, max_size=4), max_leaves=12)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(path=st.sampled_from(["/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/completions"]), body=_json)
def test_client_input_never_gets_a_500(stack, path, body):
    live, _, _ = stack
    if isinstance(body, dict):
        body.setdefault("max_tokens", 4)
        body.setdefault("max_output_tokens", 4)
    r = httpx.post(f"{live.url}{path}", json=body, headers={"Authorization": "Bearer fuzz", "x-api-key": "fuzz"}, timeout=60)
    assert r.status_code < 500, (path, body, r.text[:300])

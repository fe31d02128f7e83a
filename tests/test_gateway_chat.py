"""POST /v1/chat/completions through the official openai SDK, against a live gateway.

The scripted engine answers with chosen text (scored by the real tiny model, so ids and logprobs
are real); every test also checks what was recorded: decode(prompt_ids) is the model's own chat
template applied to the request, and the output ids decode to what the client received.
"""

from __future__ import annotations

import json

import httpx
import pytest

from forge_cli.engine.scripted import ScriptedEngine
from forge_cli.gateway.state import GatewayState
from forge_cli.pool.store import DataPool
from tests.conftest import LiveGateway, tool_formats

BASH = {"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                          "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
CALL = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>'


class Replies:
    """The scripted policy: replies queued by the test, else a default."""

    def __init__(self) -> None:
        self.queue: list[str] = []

    def __call__(self, context):
        return self.queue.pop(0) if self.queue else "Hello from the scripted policy."


@pytest.fixture(scope="module")
def stack(tiny_model, tmp_path_factory):
    replies = Replies()
    engine = ScriptedEngine(tiny_model, replies)
    pool = DataPool.sqlite(tmp_path_factory.mktemp("gw") / "pool.sqlite")
    state = GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, admin_key="admin-secret")
    live = LiveGateway(state)
    yield live, replies, pool
    live.stop()
    pool.close()


def recorded(stack, key):
    live, _, pool = stack
    state = live.state
    return pool.trajectory(state.sessions[state.by_key[key]].trajectory_id).completions


def template(stack, messages, tools=None):
    tok = stack[0].state.tokenizer
    return tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)


def test_plain_chat_and_recording(stack):
    live, replies, _ = stack
    replies.queue.append("Paris is the capital of France.")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]
    r = live.openai("k-plain").chat.completions.create(model="forge", messages=messages, max_tokens=64, temperature=0.7)
    assert r.choices[0].message.content == "Paris is the capital of France."
    assert r.choices[0].finish_reason == "stop"
    [c] = recorded(stack, "k-plain")
    tok = live.state.tokenizer
    assert tok.decode(c.prompt_ids) == template(stack, messages)
    assert c.prompt_ids == tok.encode(template(stack, messages), add_special_tokens=False)
    assert tok.decode(c.output_ids[:-1]) == r.choices[0].message.content and c.output_ids[-1] == tok.eos_token_id
    assert c.sampling.temperature == 0.7 and c.policy_version == 0 and c.tool_format == "hermes"
    assert r.usage.prompt_tokens == len(c.prompt_ids) and r.usage.completion_tokens == len(c.output_ids)


def test_tool_call_round_trip(stack):
    live, replies, _ = stack
    client = live.openai("k-tools")
    replies.queue.append(f"Let me look.\n{CALL}")
    first = [{"role": "user", "content": "What is here?"}]
    r = client.chat.completions.create(model="forge", messages=first, tools=[BASH], tool_choice="auto")
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert msg.content == "Let me look."
    assert msg.tool_calls[0].function.name == "bash" and json.loads(msg.tool_calls[0].function.arguments) == {"command": "ls -la"}
    # the tool result comes back; assistant content empty, null or absent are all accepted
    for variant in ({"content": None}, {"content": ""}, {}):
        replies.queue.append("There is a README.")
        history = first + [
            {"role": "assistant", **variant, "tool_calls": [{"id": msg.tool_calls[0].id, "type": "function",
                                                           "function": {"name": "bash", "arguments": '{"command": "ls -la"}'}}]},
            {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "README.md"},
        ]
        r2 = client.chat.completions.create(model="forge", messages=history, tools=[BASH])
        assert r2.choices[0].message.content == "There is a README."
    calls = recorded(stack, "k-tools")
    assert len(calls) == 4
    tok = live.state.tokenizer
    # the oracle: the model's own template with the request's messages and tools
    oracle_history = first + [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "bash", "arguments": {"command": "ls -la"}}}]},
                              {"role": "tool", "content": "README.md"}]
    assert tok.decode(calls[0].prompt_ids) == template(stack, first, tools=[BASH])
    assert tok.decode(calls[1].prompt_ids) == template(stack, oracle_history, tools=[BASH])
    assert "<tool_response>\nREADME.md\n</tool_response>" in tok.decode(calls[3].prompt_ids)


def test_streaming_with_tool_calls_and_usage(stack):
    live, replies, _ = stack
    replies.queue.append(f"Checking.\n{CALL}")
    chunks = list(live.openai("k-stream").chat.completions.create(
        model="forge", messages=[{"role": "user", "content": "list"}], tools=[BASH], stream=True,
        stream_options={"include_usage": True}))
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    args = "".join(tc.function.arguments or "" for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or []))
    names = [tc.function.name for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or []) if tc.function.name]
    assert content == "Checking." and names == ["bash"] and json.loads(args) == {"command": "ls -la"}
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(recorded(stack, "k-stream")[0].output_ids)


def test_raw_stream_ends_with_done(stack):
    live, _, _ = stack
    with httpx.stream("POST", f"{live.url}/v1/chat/completions", headers={"Authorization": "Bearer k-raw"},
                      json={"messages": [{"role": "user", "content": "hi"}], "stream": True}) as resp:
        lines = [line for line in resp.iter_lines() if line]
    assert resp.status_code == 200 and lines[-1] == "data: [DONE]"


def test_n_logprobs_stop_and_parts(stack):
    live, replies, _ = stack
    replies.queue += ["one. STOP two", "three"]
    r = live.openai("k-n").chat.completions.create(
        model="forge", n=2, logprobs=True, stop=["STOP"],
        messages=[{"role": "user", "content": [{"type": "text", "text": "count "}, {"type": "text", "text": "please"}]},
                  {"role": "system", "content": "a system message in the middle"}])
    assert [c.message.content for c in r.choices] == ["one. ", "three"]
    calls = recorded(stack, "k-n")
    assert len(calls) == 2
    assert [lp.logprob for lp in r.choices[0].logprobs.content] == pytest.approx(calls[0].output_logprobs)
    assert "count please" in live.state.tokenizer.decode(calls[0].prompt_ids)
    assert "<|im_start|>system\na system message in the middle" in live.state.tokenizer.decode(calls[0].prompt_ids)


def test_unparsable_tool_call_is_text_and_a_parse_error(stack):
    live, replies, _ = stack
    replies.queue.append('<tool_call>\n{"name": "bash", "arguments": {"command": }\n</tool_call>')
    r = live.openai("k-bad").chat.completions.create(model="forge", messages=[{"role": "user", "content": "x"}], tools=[BASH])
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.tool_calls is None
    assert "<tool_call>" in r.choices[0].message.content
    [c] = recorded(stack, "k-bad")
    assert c.parse_errors and "not valid JSON" in c.parse_errors[0]["reason"]


def test_models_health_metrics(stack):
    live, _, _ = stack
    assert live.openai().models.list().data[0].id == "forge"
    assert httpx.get(f"{live.url}/health").json()["status"] == "ok"
    metrics = httpx.get(f"{live.url}/metrics").text
    assert 'forge_gateway_requests_total{endpoint="/v1/chat/completions",status="200"}' in metrics
    assert "forge_gateway_tokens_total" in metrics and "forge_gateway_request_seconds_bucket" in metrics


def test_history_reuses_the_sampled_ids(stack):
    """Turn 2's prompt starts with turn 1's exact prompt+output ids when the history renders back to that text."""
    live, replies, _ = stack
    client = live.openai("k-reuse")
    replies.queue.append(CALL)
    first = [{"role": "user", "content": "list"}]
    r = client.chat.completions.create(model="forge", messages=first, tools=[BASH])
    call = r.choices[0].message.tool_calls[0]
    replies.queue.append("done")
    client.chat.completions.create(model="forge", tools=[BASH], messages=first + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": call.id, "type": "function",
                                                               "function": {"name": "bash", "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "a.txt"}])
    one, two = recorded(stack, "k-reuse")
    assert two.prompt_ids[: len(one.prompt_ids) + len(one.output_ids)] == one.prompt_ids + one.output_ids
    # recorded: the first call had no history; the second's began with the first's ids (as rendered
    # or put back), and /metrics counts it under its kind
    assert one.history.kind == "first" and two.history.kind in ("exact", "reused") and two.history.at is None
    assert two.history.family == live.state.formats.family
    # stored: the second prompt as the first call's ids plus the ids after them (read back whole above)
    with stack[2]._read() as cur:
        stored = cur.one("SELECT prompt_base, prompt_shared, LENGTH(prompt_ids) FROM completions WHERE id = ?", (two.id,))
    shared = len(one.prompt_ids) + len(one.output_ids)
    assert stored == (one.seq, shared, 4 * (len(two.prompt_ids) - shared))
    metrics = httpx.get(f"{live.url}/metrics").text
    assert "forge_gateway_prefix_reuse_total" in metrics
    assert f'forge_gateway_prompt_history_total{{family="{two.history.family}",kind="{two.history.kind}",scaffold="external",tool_format="hermes"}} 1.0' in metrics


def test_a_session_speaks_its_scaffold_tool_format(stack):
    live, replies, _ = stack
    made = httpx.post(f"{live.url}/admin/sessions", headers={"Authorization": "Bearer admin-secret"},
                      json={"scaffold": "react", "tool_format": "json-block"}).json()
    assert made["tool_format"] == "json-block"
    replies.queue.append('```json\n{"name": "bash", "arguments": {"command": "ls -la"}}\n```')
    r = live.openai(made["api_key"]).chat.completions.create(model="forge", messages=[{"role": "user", "content": "x"}], tools=[BASH])
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments) == {"command": "ls -la"}
    [c] = live.state.pool.trajectory(made["trajectory_id"]).completions
    assert c.tool_format == "json-block" and "```json" in live.state.tokenizer.decode(c.prompt_ids)
    bad = httpx.post(f"{live.url}/admin/sessions", headers={"Authorization": "Bearer admin-secret"}, json={"tool_format": "nope"})
    assert bad.status_code == 400 and "no tool format named 'nope'" in bad.json()["error"]["message"]


def test_top_logprobs(stack):
    live, replies, _ = stack
    replies.queue.append("Blue, green and red.")
    r = live.openai("k-top").chat.completions.create(model="forge", logprobs=True, top_logprobs=3,
                                                      messages=[{"role": "user", "content": "colours?"}])
    [c] = recorded(stack, "k-top")
    content = r.choices[0].logprobs.content
    assert len(content) == len(c.output_ids)
    tok = live.state.tokenizer
    for entry, tok_id, lp in zip(content, c.output_ids, c.output_logprobs):
        tops = [t.logprob for t in entry.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True) and tops[0] >= lp - 1e-6
        if entry.token in [t.token for t in entry.top_logprobs]:  # the chosen id, if among the top, has its own logprob
            assert dict((t.token, t.logprob) for t in entry.top_logprobs)[entry.token] == pytest.approx(lp, abs=1e-6)
        assert entry.token == tok.decode([tok_id], skip_special_tokens=False)


def test_top_logprobs_needs_logprobs(stack):
    live, _, _ = stack
    r = httpx.post(f"{live.url}/v1/chat/completions", headers={"Authorization": "Bearer k-top-bad"},
                   json={"model": "forge", "top_logprobs": 2, "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "top_logprobs"

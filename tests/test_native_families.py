"""Real model families through the gateway: each family's real tokenizer and (test-written) chat
template, vLLM's parser for the family, a scripted policy that writes the family's own call syntax.

For each family: render → sample → parse → send back as history (with thinking) → render again,
checking the prompt ids against the plain computation (``apply_chat_template`` + ``encode``), the
parsed calls, the reasoning split, the recorded ids and the prompt-history record. Qwen3's template
drops thinking from turns before the last user message: the next prompt drifts from what was
sampled, at the first sampled token, and the gateway records where. The weights are a tiny random
model with the family's vocabulary: the policy writes the text, the model only scores it.
"""

from __future__ import annotations

import json

import pytest

from forge_cli.engine.scripted import ScriptedEngine
from forge_cli.gateway.state import GatewayState
from forge_cli.plugins import get_registry
from forge_cli.pool.store import DataPool
from tests.conftest import LiveGateway, tool_formats
from tests.families import SPECS, completion_text
from tests.families.scored import scored_model

pytestmark = pytest.mark.slow

FAMILIES = ("qwen3", "qwen3_5", "llama3_1", "deepseek_v3")
THINKS = {"qwen3", "qwen3_5"}  # the families whose template renders thinking (and drops it before the last user turn)
LS = {"type": "function", "function": {"name": "ls", "description": "List a folder.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "all": {"type": "boolean"}}, "required": ["path"]}}}
ARGS = {"path": "/tmp", "all": True}
SYSTEM = {"role": "system", "content": "You are a careful assistant."}
USER = {"role": "user", "content": "What is in /tmp?"}


class Replies:
    def __init__(self) -> None:
        self.queue: list[str] = []

    def __call__(self, context):
        return self.queue.pop(0)


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    name = request.param
    folder = scored_model(name, tmp_path_factory.mktemp("scored"))
    replies = Replies()
    engine = ScriptedEngine(folder, replies, max_model_len=4096)
    pool = DataPool.sqlite(tmp_path_factory.mktemp("pool") / "pool.sqlite")
    reasoning = {n: e.value for n, e in get_registry().reasoning_parsers.items()}
    state = GatewayState(engine, engine.tokenizer, tool_formats(), reasoning_parsers=reasoning, default_tool_format=None,
                         model_type=SPECS[name].model_type, pool=pool, admin_key="admin")
    live = LiveGateway(state)
    yield name, live, replies, pool
    live.stop()
    pool.close()


def _assistant(calls=None, content="", thinking=None):
    turn = {"role": "assistant", "content": content}
    if calls:
        turn["tool_calls"] = calls
    if thinking is not None:
        turn["reasoning_content"] = thinking
    return turn


def _expected_ids(tok, messages):
    text = tok.apply_chat_template(messages, tools=[LS], tokenize=False, add_generation_prompt=True)
    return tok.encode(text, add_special_tokens=False)


def _completions(live, pool, key):
    state = live.state
    return pool.trajectory(state.sessions[state.by_key[key]].trajectory_id).completions


def test_a_familys_round_trip_through_the_chat_api(family):
    name, live, replies, pool = family
    tok = live.state.tokenizer
    thinks = name in THINKS
    assert live.state.default_tool_format == "native" and live.state.formats.family == SPECS[name].model_type
    thought = "The user wants the listing; ls will tell." if thinks else None
    # 1. the model calls a tool (in its own syntax, after thinking)
    wanted = _assistant([{"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": ARGS}}], thinking=thought)
    replies.queue.append(completion_text(name, [SYSTEM, USER, wanted], [LS]))
    client = live.openai(f"k-{name}")
    first = client.chat.completions.create(model="m", messages=[SYSTEM, USER], tools=[LS])
    [call] = first.choices[0].message.tool_calls
    assert call.function.name == "ls" and json.loads(call.function.arguments) == ARGS
    assert (getattr(first.choices[0].message, "reasoning_content", None) or "").strip() == (thought or "")
    # 2. the agent sends the call back with its thinking and the tool's result
    sent = {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)]}
    if thinks:
        sent["reasoning_content"] = first.choices[0].message.reasoning_content
    result = {"role": "tool", "tool_call_id": call.id, "content": "a.txt\nb.txt"}
    answer = _assistant(content="Two files: a.txt and b.txt.", thinking="Two lines came back." if thinks else None)
    history = [SYSTEM, USER, sent, result]
    replies.queue.append(completion_text(name, [SYSTEM, USER, {**wanted, "tool_calls": [{**wanted["tool_calls"][0], "id": call.id}]},
                                                result, answer], [LS]))
    second = client.chat.completions.create(model="m", messages=history, tools=[LS])
    assert second.choices[0].message.content == "Two files: a.txt and b.txt." and not second.choices[0].message.tool_calls
    # 3. a new question: a template that drops earlier thinking makes the prompt drift
    replies.queue.append("Nothing else.")
    final = {"role": "assistant", "content": second.choices[0].message.content}
    if thinks:
        final["reasoning_content"] = second.choices[0].message.reasoning_content
    client.chat.completions.create(model="m", messages=[*history, final, {"role": "user", "content": "And /var?"}], tools=[LS])

    one, two, three = _completions(live, pool, f"k-{name}")
    # the prompts are the template's rendering of what was sent, exactly (arguments as an object)
    expected_sent = {**sent, "tool_calls": [{"id": call.id, "type": "function", "function": {"name": "ls", "arguments": ARGS}}]}
    assert one.prompt_ids == _expected_ids(tok, [SYSTEM, USER])
    expected_two = _expected_ids(tok, [SYSTEM, USER, expected_sent, result])
    assert tok.decode(two.prompt_ids) == tok.decode(expected_two)
    assert one.tool_calls == [{"name": "ls", "arguments": ARGS}] and two.tool_calls == [] and one.parse_errors == []
    assert one.tool_format == "native" and {one.history.family, two.history.family} == {SPECS[name].model_type}
    # the tool loop keeps the sampled ids: the second prompt begins with the first call, as sampled
    assert one.history.kind == "first" and two.history.kind in ("exact", "reused")
    assert two.prompt_ids[: len(one.prompt_ids) + len(one.output_ids)] == one.prompt_ids + one.output_ids
    if thinks:  # the earlier thinking is gone from the rendering: a new branch, from the first sampled token
        assert three.history.kind == "drifted" and three.history.at == len(one.prompt_ids)
        assert tok.decode(one.output_ids).startswith("<think>") and "<think>" not in tok.decode(three.prompt_ids)
    else:
        assert three.history.kind in ("exact", "reused")


def test_thinking_streams_and_comes_back_in_every_apis_shape(family):
    """Chat Completions streams ``reasoning_content`` deltas; Responses returns a ``reasoning`` item
    and Messages a ``thinking`` block; each, sent back, renders as the template renders thinking
    (a family without thinking: the same round trip, with none)."""
    name, live, replies, pool = family
    import anthropic

    tok = live.state.tokenizer
    plan = "Plan: list it." if name in THINKS else ""  # a family whose template has no thinking: none comes back
    wanted = _assistant([{"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": ARGS}}],
                        thinking=plan or None)
    reply = completion_text(name, [USER, wanted], [LS])
    # streamed chat: the thinking arrives as reasoning_content deltas, the call at the end
    replies.queue.append(reply)
    chunks = list(live.openai(f"s-{name}").chat.completions.create(model="m", messages=[USER], tools=[LS], stream=True))
    thinking = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert thinking.strip() == plan and content == "" and calls[0].function.name == "ls"
    # Responses: a reasoning item, sent back as input, renders as the template renders thinking
    replies.queue.append(reply)
    tool = {"type": "function", "name": "ls", "description": "List a folder.", "parameters": LS["function"]["parameters"]}
    first = live.openai(f"r-{name}").responses.create(model="m", input=[USER], tools=[tool])
    kinds = [item.type for item in first.output]
    assert kinds == (["reasoning"] if plan else []) + ["function_call"]
    fc = first.output[-1]
    thought = first.output[0].content[0].text if plan else None
    assert (thought or "").strip() == plan
    replies.queue.append("Done.")
    back = [USER, *[item.model_dump(exclude_none=True) for item in first.output],
            {"type": "function_call_output", "call_id": fc.call_id, "output": "a.txt"}]
    live.openai(f"r-{name}").responses.create(model="m", input=back, tools=[tool])
    one, two = _completions(live, pool, f"r-{name}")
    expected = _expected_ids(tok, [USER, _assistant([{"id": fc.call_id, "type": "function", "function": {"name": "ls", "arguments": ARGS}}],
                                                    thinking=thought),
                                   {"role": "tool", "tool_call_id": fc.call_id, "name": "ls", "content": "a.txt"}])
    assert tok.decode(two.prompt_ids) == tok.decode(expected) and two.history.kind in ("exact", "reused")
    # Messages: a thinking block, sent back, the same
    replies.queue.append(reply)
    client = anthropic.Anthropic(base_url=live.url, api_key=f"a-{name}", max_retries=0)
    tool_a = {"name": "ls", "description": "List a folder.", "input_schema": LS["function"]["parameters"]}
    msg = client.messages.create(model="m", max_tokens=200, messages=[USER], tools=[tool_a])
    assert [b.type for b in msg.content] == (["thinking"] if plan else []) + ["tool_use"]
    assert (msg.content[0].thinking.strip() if plan else "") == plan
    replies.queue.append("Done.")
    client.messages.create(model="m", max_tokens=200, tools=[tool_a], messages=[
        USER, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": msg.content[-1].id, "content": "a.txt"}]}])
    _, after = _completions(live, pool, f"a-{name}")
    assert after.history.kind in ("exact", "reused")
    assert after.prompt_ids[: len(one.prompt_ids)] == one.prompt_ids  # the same first prompt, whichever API


def test_mistral_renders_through_mistral_common_and_keeps_its_call_ids(tmp_path_factory):
    """Mistral's template is code (mistral-common, through transformers' MistralCommonBackend): the
    prompt ids are mistral-common's own (its text does not encode back to them), the call keeps the
    model's nine-character id (mistral-common checks it when the call comes back), and the tool loop
    keeps the sampled ids."""
    from tests.families.native import mistral_completion, render_mistral

    folder = scored_model("mistral", tmp_path_factory.mktemp("scored"))
    replies = Replies()
    engine = ScriptedEngine(folder, replies, max_model_len=4096)
    pool = DataPool.sqlite(tmp_path_factory.mktemp("pool") / "pool.sqlite")
    state = GatewayState(engine, engine.tokenizer, tool_formats(), default_tool_format=None, model_type="mistral", pool=pool)
    live = LiveGateway(state)
    try:
        assert state.default_tool_format == "native" and state.formats.tool_parser == "mistral"
        wanted = _assistant([{"id": "abcdefghi", "type": "function", "function": {"name": "ls", "arguments": ARGS}}])
        _, ids = mistral_completion([USER, wanted], [LS])
        replies.queue.append(ids)  # ids: mistral-common's text does not encode its special tokens back
        client = live.openai("k-mistral")
        first = client.chat.completions.create(model="m", messages=[USER], tools=[LS])
        [call] = first.choices[0].message.tool_calls
        assert (call.id, call.function.name, json.loads(call.function.arguments)) == ("abcdefghi", "ls", ARGS)
        result = {"role": "tool", "tool_call_id": call.id, "content": "a.txt"}
        sent = {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)]}
        _, answer = mistral_completion([USER, wanted, result, _assistant(content="One file.")], [LS])
        replies.queue.append(answer)
        second = client.chat.completions.create(model="m", messages=[USER, sent, result], tools=[LS])
        assert second.choices[0].message.content == "One file."
        one, two = pool.trajectory(state.sessions[state.by_key["k-mistral"]].trajectory_id).completions
        assert one.prompt_ids == render_mistral([USER], [LS])[1]
        assert two.prompt_ids == render_mistral([USER, wanted, result], [LS])[1]
        assert one.tool_calls == [{"name": "ls", "arguments": ARGS}] and two.history.kind == "exact"
    finally:
        live.stop()
        pool.close()


def test_gpt_oss_renders_and_parses_through_harmony(tmp_path_factory, monkeypatch):
    """gpt-oss's template is code (openai-harmony): harmony renders the prompt ids and reads the
    channels back — the call from ``commentary``, the thinking from ``analysis`` — and the tool loop
    keeps the sampled ids; its thinking comes back as reasoning_content."""
    from tests.families.native import gpt_oss_completion, render_gpt_oss, tiktoken_env

    for name, value in tiktoken_env().items():  # harmony's vocabulary, offline
        monkeypatch.setenv(name, value)
    folder = scored_model("gpt_oss", tmp_path_factory.mktemp("scored"))
    replies = Replies()
    engine = ScriptedEngine(folder, replies, max_model_len=4096)
    pool = DataPool.sqlite(tmp_path_factory.mktemp("pool") / "pool.sqlite")
    state = GatewayState(engine, engine.tokenizer, tool_formats(), default_tool_format=None, model_type="gpt_oss", pool=pool)
    live = LiveGateway(state)
    try:
        assert state.default_tool_format == "native" and state.formats.get().name == "harmony"
        wanted = _assistant([{"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": ARGS}}],
                            thinking="I should list it.")
        _, ids = gpt_oss_completion([SYSTEM, USER, wanted], [LS])
        replies.queue.append(ids)
        client = live.openai("k-oss")
        first = client.chat.completions.create(model="m", messages=[SYSTEM, USER], tools=[LS])
        message = first.choices[0].message
        [call] = message.tool_calls
        assert (call.function.name, json.loads(call.function.arguments)) == ("ls", ARGS)
        assert message.reasoning_content == "I should list it."
        result = {"role": "tool", "tool_call_id": call.id, "content": "a.txt"}
        sent = {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)],
                "reasoning_content": message.reasoning_content}
        replies.queue.append("<|channel|>final<|message|>One file.")  # its specials are the tokenizer's own tokens
        second = client.chat.completions.create(model="m", messages=[SYSTEM, USER, sent, result], tools=[LS])
        assert second.choices[0].message.content == "One file."
        one, two = pool.trajectory(state.sessions[state.by_key["k-oss"]].trajectory_id).completions
        assert one.prompt_ids == render_gpt_oss([SYSTEM, USER], [LS])[1]
        assert two.prompt_ids == render_gpt_oss([SYSTEM, USER, {**wanted, "tool_calls": [{**wanted["tool_calls"][0], "id": call.id}]},
                                                 result], [LS])[1]
        assert one.tool_calls == [{"name": "ls", "arguments": ARGS}] and one.tool_format == "harmony"
        assert two.history.kind in ("exact", "reused")  # harmony keeps the analysis of the turn in progress
    finally:
        live.stop()
        pool.close()


def test_deepseek_v32_renders_through_vllms_encoder(tmp_path_factory):
    """DeepSeek V3.2 ships its chat template as Python (vLLM's encoder), not Jinja: the gateway
    renders with it (model_type deepseek_v32), vLLM's deepseek_v32 parser reads the DSML calls it
    teaches, and the tool loop keeps the sampled ids. (V3.2 shares V3's vocabulary.)"""
    from tests.families.native import render_deepseek_v32

    folder = scored_model("deepseek_v3", tmp_path_factory.mktemp("scored"))
    replies = Replies()
    engine = ScriptedEngine(folder, replies, max_model_len=4096)
    pool = DataPool.sqlite(tmp_path_factory.mktemp("pool") / "pool.sqlite")
    state = GatewayState(engine, engine.tokenizer, tool_formats(), default_tool_format=None, model_type="deepseek_v32", pool=pool,
                         reasoning_parser="none")
    live = LiveGateway(state)
    try:
        assert state.default_tool_format == "native" and state.formats.tool_parser == "deepseek_v32"
        wanted = _assistant([{"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": ARGS}}])
        prompt = render_deepseek_v32([SYSTEM, USER], [LS], thinking=False)
        full = render_deepseek_v32([SYSTEM, USER, wanted], [LS], thinking=False)
        assert full.startswith(prompt)
        replies.queue.append(full[len(prompt):].removesuffix("<｜end▁of▁sentence｜>"))
        client = live.openai("k-dsv32")
        first = client.chat.completions.create(model="m", messages=[SYSTEM, USER], tools=[LS])
        [call] = first.choices[0].message.tool_calls
        assert (call.function.name, json.loads(call.function.arguments)) == ("ls", ARGS)
        one = pool.trajectory(state.sessions[state.by_key["k-dsv32"]].trajectory_id).completions[0]
        tok = state.tokenizer
        assert one.prompt_ids == tok.encode(prompt, add_special_tokens=False)  # the encoder's text, exactly
        result = {"role": "tool", "tool_call_id": call.id, "content": "a.txt"}
        sent = {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)]}
        replies.queue.append("One file.")
        client.chat.completions.create(model="m", messages=[SYSTEM, USER, sent, result], tools=[LS])
        _, two = pool.trajectory(state.sessions[state.by_key["k-dsv32"]].trajectory_id).completions
        assert two.history.kind in ("exact", "reused") and one.tool_calls == [{"name": "ls", "arguments": ARGS}]
    finally:
        live.stop()
        pool.close()


def test_forge_gateway_serve_on_a_qwen3_folder(tmp_path):
    """A user points ``forge gateway serve --model`` at a Qwen3 folder: the family comes from its
    config.json, tools and thinking go through Qwen3's own template and parsers, and the run's pool
    says so (forge pool stats: the drift table; forge pool show --tokens: where a prompt diverged)."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    from pathlib import Path

    import httpx

    from tests.waiting import wait_until

    model = scored_model("qwen3", tmp_path / "models", own_architecture=True)
    assert json.loads((model / "config.json").read_text())["model_type"] == "qwen3"
    wanted = _assistant([{"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": ARGS}}], thinking="List it.")
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"rules": [{"when": "And /var", "reply": "Nothing else."},
                                            {"when": "a.txt", "reply": "<think>\nDone.\n</think>\n\nOne file."},
                                            {"when": "/tmp", "reply": completion_text("qwen3", [USER, wanted], [LS])}]}))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    forge = str(Path(sys.executable).with_name("forge"))
    proc = subprocess.Popen([forge, "gateway", "serve", "--model", str(model), "--engine", "scripted", "--policy", str(policy),
                             "--port", str(port), "--run", "qwen"], cwd=tmp_path, env={**os.environ, "COLUMNS": "250"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    headers = {"Authorization": "Bearer agent"}
    try:
        def healthy() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"forge gateway serve exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, what="the gateway to answer /health")
        first = httpx.post(url, headers=headers, json={"messages": [USER], "tools": [LS]}, timeout=60).json()["choices"][0]["message"]
        assert first["reasoning_content"].strip() == "List it." and first["tool_calls"][0]["function"]["name"] == "ls"
        result = {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "a.txt"}
        second = httpx.post(url, headers=headers, json={"messages": [USER, first, result], "tools": [LS]}, timeout=60).json()
        answer = second["choices"][0]["message"]
        assert answer["content"] == "One file." and answer["reasoning_content"].strip() == "Done."
        third = httpx.post(url, headers=headers, json={"messages": [USER, first, result, answer, {"role": "user", "content": "And /var?"}],
                                                       "tools": [LS]}, timeout=60)
        assert third.status_code == 200
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert 'forge_gateway_prompt_history_total{family="qwen3",kind="drifted",scaffold="external",tool_format="native"} 1.0' in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    run = tmp_path / "runs" / "qwen"
    stats = json.loads(subprocess.run([forge, "pool", "stats", str(run), "--json"], capture_output=True, text=True, cwd=tmp_path,
                                      check=True).stdout)
    [row] = stats["prompt_history"]
    assert (row["family"], row["tool_format"], row["first"], row["exact"] + row["reused"], row["drifted"]) == ("qwen3", "native", 1, 1, 1)
    from forge_cli.pool.store import DataPool

    with DataPool.sqlite(run / "pool.sqlite") as pool:
        trajectory = pool.groups()[0].trajectories[0].id
    shown = subprocess.run([forge, "pool", "show", trajectory, "--run", str(run), "--tokens"], capture_output=True, text=True,
                           cwd=tmp_path, check=True, env={**os.environ, "COLUMNS": "250"}).stdout
    assert "drifted at" in shown and "drifted here" in shown

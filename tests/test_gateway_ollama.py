"""The Ollama API (``/api/chat``, ``/api/generate``, ``/api/tags``, ``/api/show``, ``/api/version``,
``/api/ps``), driven by the official ``ollama`` client and by agno's Ollama model against a live
gateway of a scripted policy; every body and NDJSON line read raw and validated strictly against
the client's own types; the recorded prompt the same as the same conversation's through
``/v1/chat/completions``; errors in Ollama's ``{"error": …}`` shape; keys and ``/s/<session>`` URLs.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import ollama
import pytest
from ollama._types import ChatResponse, GenerateResponse, ListResponse, ProcessResponse, ShowResponse
from pydantic import TypeAdapter

from forge_cli.engine.scripted import ScriptedEngine
from forge_cli.gateway.state import GatewayState
from forge_cli.pool.store import DataPool
from forge_cli.specs import ReasoningParser
from tests.conftest import LiveGateway, tool_formats
from tests.test_gateway_apis import recorded, stack  # noqa: F401  # the live gateway of a scripted policy (a fixture)
from tests.test_gateway_chat import Replies

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
USER = {"role": "user", "content": "Weather in Paris?"}
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")  # Go's RFC 3339 with nanoseconds, UTC


def client(live, key: str | None = None, host: str | None = None) -> ollama.Client:
    return ollama.Client(host=host or live.url, headers={"Authorization": f"Bearer {key}"} if key else None)


def post(live, path: str, body: dict[str, Any], key: str) -> httpx.Response:
    return httpx.post(f"{live.url}{path}", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)


# ---- strict validation against the client's types ---------------------------------------------------


def conforms(kind: Any, data: dict[str, Any]) -> Any:
    """``data`` as the client's type ``kind``, validated strictly; its dump (the fields set, the wire
    names) must be ``data`` itself: a key the type does not name (which the client drops) fails it."""
    parsed = TypeAdapter(kind).validate_json(json.dumps(data), strict=True)
    assert parsed.model_dump(mode="json", by_alias=True, exclude_unset=True) == data
    if "created_at" in data:
        assert STAMP.match(data["created_at"]), data["created_at"]
    return parsed


def lines(r: httpx.Response, kind: Any) -> list[Any]:
    """An NDJSON stream, each line conforming; only the last says ``done``, and it has every count."""
    assert r.status_code == 200, r.text[:500]
    assert r.headers["content-type"].startswith("application/x-ndjson")
    assert r.text.endswith("\n") and "\n\n" not in r.text
    parsed = [conforms(kind, json.loads(line)) for line in r.text.splitlines()]
    assert [p.done for p in parsed] == [False] * (len(parsed) - 1) + [True]
    last = parsed[-1]
    assert last.done_reason in ("stop", "length") and last.prompt_eval_count > 0 and last.eval_count > 0
    assert all(getattr(last, f) is not None for f in ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration"))
    assert all(p.done_reason is None and p.total_duration is None for p in parsed[:-1])
    return parsed


@pytest.mark.parametrize("tools, logprobs", [(False, False), (True, False), (False, True), (True, True)])
def test_chat_bodies_and_lines_conform(stack, tools, logprobs):
    live, replies, _ = stack
    body: dict[str, Any] = {"model": "llama3.1", "messages": [USER], "stream": False}
    if tools:
        body["tools"] = [WEATHER]
    if logprobs:
        body |= {"logprobs": True, "top_logprobs": 2}
    reply = f"Let me look.\n{CALL}" if tools else "Sunny, 21 C."
    replies.queue.append(reply)
    key = f"o-body-{tools}-{logprobs}"
    r = post(live, "/api/chat", body, key)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    whole = conforms(ChatResponse, r.json())
    assert whole.model == "llama3.1" and whole.done and whole.done_reason == "stop" and whole.message.role == "assistant"
    [c] = recorded(stack, key)
    assert (whole.prompt_eval_count, whole.eval_count) == (len(c.prompt_ids), len(c.output_ids))
    if tools:
        assert whole.message.content == "Let me look."
        assert [(t.function.name, t.function.arguments) for t in whole.message.tool_calls] == [("get_weather", {"city": "Paris"})]
    if logprobs:
        assert [lp.logprob for lp in whole.logprobs] == pytest.approx(c.output_logprobs)
        assert all(len(lp.top_logprobs) == 2 for lp in whole.logprobs)
    replies.queue.append(reply)
    streamed = lines(post(live, "/api/chat", {**body, "stream": True}, key + "-s"), ChatResponse)
    assert "".join(p.message.content for p in streamed) == whole.message.content
    calls = [call for p in streamed for call in p.message.tool_calls or []]
    assert [(t.function.name, t.function.arguments) for t in calls] == [(t.function.name, t.function.arguments)
                                                                         for t in whole.message.tool_calls or []]
    assert (streamed[-1].prompt_eval_count, streamed[-1].eval_count) == (whole.prompt_eval_count, whole.eval_count)
    if logprobs:
        assert [lp.logprob for lp in streamed[-1].logprobs] == pytest.approx([lp.logprob for lp in whole.logprobs])


@pytest.mark.parametrize("raw", [False, True])
def test_generate_bodies_and_lines_conform(stack, raw):
    """``/api/generate``: raw, the prompt is encoded as it is; else it is one user turn after
    ``system`` in the chat template, the prompt ``/v1/chat/completions`` renders for those messages."""
    live, replies, _ = stack
    body: dict[str, Any] = {"model": "forge", "prompt": "Why is the sky blue?", "stream": False, "raw": raw}
    if not raw:
        body["system"] = "Be brief."
    replies.queue.append("Rayleigh scattering.")
    key = f"o-gen-{raw}"
    whole = conforms(GenerateResponse, post(live, "/api/generate", body, key).json())
    assert whole.response == "Rayleigh scattering." and whole.done and whole.context is None and whole.thinking is None
    [c] = recorded(stack, key)
    tok = live.state.tokenizer
    if raw:
        assert c.prompt_ids == tok.encode("Why is the sky blue?", add_special_tokens=False)
    else:
        replies.queue.append("Rayleigh scattering.")
        live.openai(key + "-chat").chat.completions.create(model="forge", messages=[
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why is the sky blue?"}])
        assert c.prompt_ids == recorded(stack, key + "-chat")[0].prompt_ids
    replies.queue.append("Rayleigh scattering.")
    streamed = lines(post(live, "/api/generate", {**body, "stream": True}, key + "-s"), GenerateResponse)
    assert "".join(p.response for p in streamed) == whole.response
    assert recorded(stack, key + "-s")[0].prompt_ids == c.prompt_ids


def test_tags_show_version_ps_conform(stack):
    live, _, _ = stack
    tags = httpx.get(f"{live.url}/api/tags").json()
    [entry] = tags["models"]
    assert entry.pop("name") == entry["model"] == "forge:latest"  # Ollama sends ``name`` too; the client's type has only ``model``
    listed = conforms(ListResponse, tags)
    assert len(listed.models[0].digest) == 64 and listed.models[0].details.families == [live.state.formats.family]
    shown = conforms(ShowResponse, httpx.post(f"{live.url}/api/show", json={"model": "forge"}).json())
    assert shown.capabilities == ["completion", "tools"]  # no reasoning parser on this gateway: no thinking
    family = shown.details.family
    assert shown.modelinfo == {"general.architecture": family, "general.basename": "forge",
                               f"{family}.context_length": live.state.engine.max_model_len}
    ps = conforms(ProcessResponse, httpx.get(f"{live.url}/api/ps").json())
    assert ps.models[0].name == "forge:latest" and ps.models[0].context_length == live.state.engine.max_model_len
    assert httpx.get(f"{live.url}/api/version").json() == {"version": "0.12.6"}
    # the client reads them all
    c = client(live)
    assert c.list().models[0].model == "forge:latest" and "tools" in c.show("anything").capabilities
    assert c.ps().models[0].model == "forge:latest"


# ---- the official client ----------------------------------------------------------------------------


def test_chat_with_the_client_streamed_and_not(stack):
    live, replies, _ = stack
    c = client(live, "o-client")
    replies.queue.append("Hello there, in one piece.")
    whole = c.chat(model="forge", messages=[USER], options={"temperature": 0.5, "top_k": 40, "num_predict": 64, "seed": 7},
                   keep_alive="5m", format="json")
    assert whole.message.content == "Hello there, in one piece." and whole.done_reason == "stop"
    replies.queue.append("Hello there, in pieces.")
    parts = list(c.chat(model="forge", messages=[USER], stream=True))
    assert "".join(p.message.content for p in parts) == "Hello there, in pieces." and parts[-1].done
    first, second = recorded(stack, "o-client")
    assert first.sampling.temperature == 0.5 and first.sampling.max_tokens == 64 and first.sampling.seed == 7
    assert first.sampling.asked == {"temperature": 0.5, "top_k": 40, "num_predict": 64, "seed": 7}  # top_k: asked, not applied
    assert first.sampling.output_format == {"type": "json_object", "name": None, "schema": None, "strict": None}
    assert second.sampling.asked == {} and second.sampling.max_tokens == live.state.engine.max_model_len - len(second.prompt_ids)
    replies.queue.append("a reply much longer than two tokens")
    short = c.chat(model="forge", messages=[USER], options={"num_predict": 2})
    assert short.done_reason == "length" and short.eval_count == 2


@pytest.mark.parametrize("streamed", [False, True])
def test_a_tool_loop_with_the_client(stack, streamed):
    """The policy calls a tool; the client sees ``message.tool_calls``, runs it and sends the result
    back as a ``tool`` message (``tool_name``); the policy answers; both prompts are recorded."""
    live, replies, _ = stack
    key = f"o-tools-{streamed}"
    c = client(live, key)

    def get_weather(city: str) -> str:
        """Weather in a city.

        Args:
          city: The city's name.
        """
        return f"sunny in {city}, 21 C"

    def ask(messages):
        if not streamed:
            return c.chat(model="forge", messages=messages, tools=[get_weather]).message
        parts = list(c.chat(model="forge", messages=messages, tools=[get_weather], stream=True))
        calls = [call for p in parts for call in p.message.tool_calls or []]
        return ollama.Message(role="assistant", content="".join(p.message.content for p in parts), tool_calls=calls or None)

    messages: list[Any] = [USER]
    replies.queue.extend([f"I will check.\n{CALL}", "It is sunny in Paris."])
    first = ask(messages)
    assert first.content == "I will check."
    [call] = first.tool_calls
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
    messages += [first, {"role": "tool", "tool_name": call.function.name, "content": get_weather(**call.function.arguments)}]
    answer = ask(messages)
    assert answer.content == "It is sunny in Paris." and not answer.tool_calls
    one, two = recorded(stack, key)
    assert one.tool_calls == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    prompt = live.state.tokenizer.decode(two.prompt_ids)
    assert "<tool_response>\nsunny in Paris, 21 C\n</tool_response>" in prompt and "get_weather" in prompt
    assert two.prompt_ids[: len(one.prompt_ids) + len(one.output_ids)] == one.prompt_ids + one.output_ids  # the loop keeps the sampled ids


def test_ollama_chat_records_the_prompt_chat_completions_records(stack):
    """One conversation (system, a call, its result, a new question), sent as Ollama's messages and
    as OpenAI's: the same rendering, the same prompt ids."""
    live, replies, _ = stack
    history = [{"role": "system", "content": "You help."}, USER]
    ollama_messages = [*history, {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_name": "get_weather", "content": "sunny"}, {"role": "user", "content": "And tomorrow?"}]
    openai_messages = [*history, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny"}, {"role": "user", "content": "And tomorrow?"}]
    replies.queue.extend(["Rain.", "Rain."])
    r = post(live, "/api/chat", {"model": "forge", "messages": ollama_messages, "tools": [WEATHER], "stream": False}, "o-same")
    assert r.status_code == 200, r.text
    live.openai("o-same-openai").chat.completions.create(model="forge", messages=openai_messages, tools=[WEATHER])
    [mine], [theirs] = recorded(stack, "o-same"), recorded(stack, "o-same-openai")
    assert mine.prompt_ids == theirs.prompt_ids and "sunny" in live.state.tokenizer.decode(mine.prompt_ids)


# ---- thinking ----------------------------------------------------------------------------------------


class ThinkTags(ReasoningParser):
    """``<think>…</think>`` before the answer: the test's own reasoning parser (the registered ones are vLLM's)."""

    name = "think-tags"
    description = "Thinking between <think> and </think>."
    start, end = "<think>", "</think>"

    def split(self, text: str) -> tuple[str, str]:
        if not text.startswith(self.start) or self.end not in text:
            return "", text
        thought, _, answer = text[len(self.start):].partition(self.end)
        return thought, answer


@pytest.fixture(scope="module")
def thinking(tiny_model, tmp_path_factory):
    replies = Replies()
    engine = ScriptedEngine(tiny_model, replies)
    pool = DataPool.sqlite(tmp_path_factory.mktemp("gw-think") / "pool.sqlite")
    live = LiveGateway(GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, reasoning_parsers={"think-tags": ThinkTags()},
                                    reasoning_parser="think-tags"))
    yield live, replies
    live.stop()
    pool.close()


def test_think_returns_the_thinking(thinking):
    """``think``: the parser's thinking is the message's ``thinking`` (``/api/generate``: the body's),
    streamed first; ``think: false`` leaves it out of the answer; sent back, it is taken."""
    live, replies = thinking
    c = client(live, "o-think")
    reply = "<think>The user wants the weather.</think>Sunny."
    replies.queue.append(reply)
    whole = c.chat(model="forge", messages=[USER], think=True)
    assert (whole.message.thinking, whole.message.content) == ("The user wants the weather.", "Sunny.")
    replies.queue.append(reply)
    parts = list(c.chat(model="forge", messages=[USER], think=True, stream=True))
    assert "".join(p.message.thinking or "" for p in parts) == "The user wants the weather."
    assert "".join(p.message.content for p in parts) == "Sunny."
    first_text = next(i for i, p in enumerate(parts) if p.message.content)
    assert all(p.message.thinking is None for p in parts[first_text:])  # the thinking comes first
    replies.queue.extend([reply, reply])
    hidden = c.chat(model="forge", messages=[USER], think=False)
    assert hidden.message.thinking is None and hidden.message.content == "Sunny."
    assert not any(p.message.thinking for p in c.chat(model="forge", messages=[USER], think=False, stream=True))
    replies.queue.append(reply)
    generated = c.generate(model="forge", prompt="Weather?", think=True)
    assert (generated.thinking, generated.response) == ("The user wants the weather.", "Sunny.")
    replies.queue.append("Still sunny.")
    c.chat(model="forge", messages=[USER, whole.message, {"role": "user", "content": "Tomorrow?"}], think=True)
    assert "thinking" in c.show("forge").capabilities


# ---- agno ---------------------------------------------------------------------------------------------


def test_an_agno_agent_runs_a_tool_loop(stack):
    """agno's ``Ollama`` model (the official client inside) with an ``Agent`` and a Python tool:
    the policy calls the tool, agno runs it and sends the result back, the policy answers."""
    pytest.importorskip("agno")
    from agno.agent import Agent
    from agno.models.ollama import Ollama

    live, replies, _ = stack
    ran = []

    def get_weather(city: str) -> str:
        """Weather in a city.

        Args:
            city: The city's name.
        """
        ran.append(city)
        return "sunny, 21 C"

    replies.queue.extend([CALL, "It is sunny in Paris."])
    agent = Agent(model=Ollama(id="forge", host=live.url, api_key="o-agno"), tools=[get_weather], telemetry=False)
    out = agent.run("Weather in Paris?")
    assert out.content == "It is sunny in Paris." and ran == ["Paris"]
    one, two = recorded(stack, "o-agno")
    assert one.tool_calls == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in live.state.tokenizer.decode(two.prompt_ids)
    replies.queue.extend([CALL, "Sunny, streamed."])
    streamed = [event.content for event in agent.run("Weather in Paris, streamed?", stream=True) if getattr(event, "content", None)]
    assert "".join(str(c) for c in streamed).endswith("Sunny, streamed.") and ran == ["Paris", "Paris"]


# ---- keys and sessions -------------------------------------------------------------------------------


def test_keys_and_session_urls(stack):
    """A Bearer key is its trajectory; the client pointed at ``/s/<session>`` records into that
    session with no key; an unknown session, or no key at all, is a 401 in Ollama's shape."""
    live, replies, pool = stack
    admin = {"Authorization": f"Bearer {live.state.admin_key}"}
    made = httpx.post(f"{live.url}/admin/sessions", headers=admin, json={"task_id": "t"}).json()
    replies.queue.append("In the session.")
    in_session = client(live, host=f"{live.url}/s/{made['session']}")
    assert in_session.chat(model="forge", messages=[USER]).message.content == "In the session."
    assert in_session.list().models[0].model == "forge:latest"
    [c] = pool.trajectory(made["trajectory_id"]).completions
    assert live.state.tokenizer.decode(c.output_ids).startswith("In the session.")
    for r in (httpx.post(f"{live.url}/s/nope/api/chat", json={"model": "forge", "messages": [USER]}),
              httpx.post(f"{live.url}/api/chat", json={"model": "forge", "messages": [USER]})):
        assert r.status_code == 401 and ollama_error_ok(r)
    with pytest.raises(ollama.ResponseError) as raised:
        client(live).chat(model="forge", messages=[USER])
    assert raised.value.status_code == 401 and "missing API key" in raised.value.error


# ---- errors ------------------------------------------------------------------------------------------

HI = [{"role": "user", "content": "hi"}]
BAD = [
    ("/api/chat", {"model": "forge", "messages": []}, "messages"),
    ("/api/chat", {"messages": HI}, "model"),
    ("/api/chat", {"model": "forge", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ("/api/chat", {"model": "forge", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ("/api/chat", {"model": "forge", "messages": [{"role": "tool", "content": "x"}]}, "messages[0]"),
    ("/api/chat", {"model": "forge", "messages": [*HI, {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]},
                                                  {"role": "tool", "content": "a"}, {"role": "tool", "content": "b"}]}, "messages[3]"),
    ("/api/chat", {"model": "forge", "messages": [*HI, {"role": "assistant", "tool_calls": [
        {"function": {"name": "f", "arguments": '{"a": 1}'}}]}]}, "messages[1].tool_calls[0].function.arguments"),
    ("/api/chat", {"model": "forge", "messages": [{"role": "user", "content": "x", "tool_calls": [{"function": {"name": "f"}}]}]},
     "messages[0]"),
    ("/api/chat", {"model": "forge", "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, "messages[0].images"),
    ("/api/chat", {"model": "forge", "messages": [{"role": "system", "content": "only instructions"}]}, "messages"),
    ("/api/chat", {"model": "forge", "messages": HI, "options": {"num_predict": 0}}, "options.num_predict"),
    ("/api/chat", {"model": "forge", "messages": HI, "options": {"num_predict": -1}}, "options.num_predict"),
    ("/api/chat", {"model": "forge", "messages": HI, "options": {"temperature": "hot"}}, "options.temperature"),
    ("/api/chat", {"model": "forge", "messages": HI, "options": {"stop": [""]}}, "options.stop"),
    ("/api/chat", {"model": "forge", "messages": HI, "options": {"stop": ""}}, "options.stop"),
    ("/api/chat", {"model": "forge", "messages": HI, "stream": "yes"}, "stream"),
    ("/api/chat", {"model": "forge", "messages": HI, "format": "xml"}, "format"),
    ("/api/chat", {"model": "forge", "messages": HI, "think": "very"}, "think"),
    ("/api/chat", {"model": "forge", "messages": HI, "top_logprobs": 2}, "top_logprobs"),
    ("/api/chat", {"model": "forge", "messages": HI, "tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "array"}}}]}, "tools"),
    ("/api/generate", {"model": "forge"}, "prompt"),
    ("/api/generate", {"model": "forge", "prompt": ""}, "prompt"),
    ("/api/generate", {"model": "forge", "prompt": "x", "raw": True, "system": "s"}, "system"),
    ("/api/generate", {"model": "forge", "prompt": "x", "suffix": "y"}, "suffix"),
    ("/api/generate", {"model": "forge", "prompt": "x", "context": [1, 2]}, "context"),
    ("/api/generate", {"model": "forge", "prompt": "x", "template": "{{ .Prompt }}"}, "template"),
    ("/api/show", {}, "model"),
]


@pytest.mark.parametrize("path, body, field", BAD, ids=[f"{p}:{f}" for p, _, f in BAD])
def test_bad_input_is_a_400_naming_the_field(stack, path, body, field):
    """Streamed by default: a request refused before its first line is a 400 with the error body, not a stream."""
    live, _, _ = stack
    r = post(live, path, body, "o-bad")
    assert r.status_code == 400 and ollama_error_ok(r), r.text
    assert r.json()["error"].startswith(field), r.json()


def test_errors_reach_the_client_and_unknown_paths_are_404s(stack):
    live, _, _ = stack
    with pytest.raises(ollama.ResponseError) as raised:
        list(client(live, "o-bad").chat(model="forge", messages=[{"role": "robot", "content": "x"}], stream=True))
    assert raised.value.status_code == 400 and "messages[0].role" in raised.value.error
    for r in (post(live, "/api/pull", {"model": "x"}, "o-bad"), httpx.get(f"{live.url}/api/chat")):
        assert r.status_code in (404, 405) and ollama_error_ok(r)


def test_openapi_documents_the_bodies(stack):
    live, _, _ = stack
    paths = httpx.get(f"{live.url}/openapi.json").json()["paths"]
    for path in ("/api/chat", "/api/generate", "/api/show", "/s/{session}/api/chat"):
        assert paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"].startswith("#/components/schemas/")
    assert {"/api/tags", "/api/version", "/api/ps"} <= set(paths)


# ---- for tests/test_gateway_fuzz.py -------------------------------------------------------------------

_BASH = {"type": "function", "function": {"name": "bash", "description": "Run.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
FUZZ_VALID: dict[str, dict[str, Any]] = {
    "/api/chat": {
        "model": "forge", "stream": False, "think": True, "keep_alive": "5m", "logprobs": True, "top_logprobs": 2, "tools": [_BASH],
        "format": {"type": "object", "properties": {"city": {"type": "string"}}},
        "options": {"temperature": 0.5, "top_p": 0.9, "top_k": 40, "num_predict": 8, "stop": ["zz"], "seed": 1, "num_ctx": 4096},
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
                     {"role": "assistant", "content": "", "thinking": "t",
                      "tool_calls": [{"function": {"name": "bash", "arguments": {"command": "ls"}}}]},
                     {"role": "tool", "tool_name": "bash", "content": "a.txt"}, {"role": "user", "content": "and?"}],
    },
    "/api/generate": {
        "model": "forge", "prompt": "hello", "system": "be brief", "stream": False, "think": False, "raw": False, "format": "json",
        "keep_alive": 0, "options": {"temperature": 1, "top_k": 5, "num_predict": 8, "stop": ["zz"], "seed": 2},
    },
}


def test_the_fuzz_bodies_are_valid(stack):
    """The bodies the fuzz test mutates are answered, whole and streamed."""
    live, _, _ = stack
    for path, body in FUZZ_VALID.items():
        whole = post(live, path, body, "o-fuzz-valid")
        assert whole.status_code == 200, (path, whole.text[:300])
        conforms(ChatResponse if path == "/api/chat" else GenerateResponse, whole.json())
        lines(post(live, path, {**body, "stream": True}, "o-fuzz-valid"), ChatResponse if path == "/api/chat" else GenerateResponse)


def ollama_error_ok(response: httpx.Response) -> bool:
    """A 4xx in Ollama's shape: ``{"error": "a message"}`` and nothing else."""
    try:
        body = response.json()
    except ValueError:
        return False
    return (400 <= response.status_code < 500 and isinstance(body, dict) and set(body) == {"error"}
            and isinstance(body["error"], str) and bool(body["error"]))

"""The request contract: strict JSON types and documented ranges on every API, the OpenAPI document
built from the request models, structured-output and tool-call context handed to the engine, and
the index of every choice when n > 1."""

from __future__ import annotations

import json

import httpx
import pytest

from forge_cli.engine.scripted import ScriptedEngine
from forge_cli.gateway.app import create_app
from forge_cli.gateway.protocol import gemini, ollama
from forge_cli.gateway.protocol.anthropic import CountTokensRequest, MessagesRequest
from forge_cli.gateway.protocol.openai_chat import ChatCompletionRequest
from forge_cli.gateway.protocol.responses import ResponsesRequest
from forge_cli.gateway.routes.admin import FinishSession, LoadWeights
from forge_cli.records.session import SessionRequest
from forge_cli.gateway.routes.completions import CompletionRequest
from forge_cli.gateway.state import GatewayState
from forge_cli.pool.store import DataPool
from tests.conftest import LiveGateway, tool_formats

MSG = [{"role": "user", "content": "hi"}]
BASH = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}


class Policy:
    def __init__(self) -> None:
        self.contexts: list[dict] = []
        self.replies: list[str] = []

    def __call__(self, context):
        self.contexts.append(context)
        return self.replies.pop(0) if self.replies else "ok"


@pytest.fixture(scope="module")
def stack(tiny_model, tmp_path_factory):
    policy = Policy()
    engine = ScriptedEngine(tiny_model, policy)
    pool = DataPool.sqlite(tmp_path_factory.mktemp("contract") / "pool.sqlite")
    live = LiveGateway(GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, admin_key="admin-secret"))
    yield live, policy, pool
    live.stop()
    pool.close()


def post(live, path, body, key="k"):
    return httpx.post(f"{live.url}{path}", json=body, headers={"Authorization": f"Bearer {key}", "x-api-key": key}, timeout=60)


def recorded(stack, key):
    live, _, pool = stack
    return pool.trajectory(live.state.sessions[live.state.by_key[key]].trajectory_id).completions


CHAT = {"messages": MSG, "max_tokens": 4}
MESSAGES = {"messages": MSG, "max_tokens": 4}
RESPONSES = {"input": "hi", "max_output_tokens": 4}
COMPLETIONS = {"prompt": "hi", "max_tokens": 4}
BAD = [
    # (path, valid body, changes, the field the 400 names)
    ("/v1/chat/completions", CHAT, {"max_tokens": True}, "max_tokens"),
    ("/v1/chat/completions", CHAT, {"max_tokens": "4"}, "max_tokens"),
    ("/v1/chat/completions", CHAT, {"max_tokens": 2**40}, "max_tokens"),
    ("/v1/chat/completions", CHAT, {"stream": "yes"}, "stream"),
    ("/v1/chat/completions", CHAT, {"logprobs": 1}, "logprobs"),
    ("/v1/chat/completions", CHAT, {"n": True}, "n"),
    ("/v1/chat/completions", CHAT, {"n": 17}, "n"),
    ("/v1/chat/completions", CHAT, {"temperature": True}, "temperature"),
    ("/v1/chat/completions", CHAT, {"temperature": 2.5}, "temperature"),
    ("/v1/chat/completions", CHAT, {"top_p": 0}, "top_p"),
    ("/v1/chat/completions", CHAT, {"seed": -1}, "seed"),
    ("/v1/chat/completions", CHAT, {"presence_penalty": 3}, "presence_penalty"),
    ("/v1/chat/completions", CHAT, {"tools": [{"type": "retrieval", "function": {"name": "x"}}]}, "tools[0].type"),
    ("/v1/chat/completions", CHAT, {"tools": [BASH], "tool_choice": {"function": {}}}, "tool_choice"),
    ("/v1/chat/completions", CHAT, {"stream_options": {"include_usage": "true"}}, "stream_options.include_usage"),
    ("/v1/chat/completions", CHAT, {"response_format": {"type": "xml"}}, "response_format.type"),
    ("/v1/chat/completions", CHAT, {"response_format": {"type": "json_schema"}}, "response_format"),
    ("/v1/chat/completions", CHAT, {"messages": [{"role": "system", "content": "be nice"}]}, "messages"),
    ("/v1/messages", MESSAGES, {"max_tokens": True}, "max_tokens"),
    ("/v1/messages", MESSAGES, {"max_tokens": 4.0}, "max_tokens"),
    ("/v1/messages", MESSAGES, {"stream": "yes"}, "stream"),
    ("/v1/messages", MESSAGES, {"temperature": 1.5}, "temperature"),
    ("/v1/messages", MESSAGES, {"top_k": -1}, "top_k"),
    ("/v1/messages", MESSAGES, {"output_config": {"format": {"type": "json_schema"}}}, "output_config.format.schema"),
    ("/v1/messages", MESSAGES, {"messages": [{"role": "system", "content": "x"}]}, "messages"),
    ("/v1/messages", MESSAGES, {"messages": [{"role": "user", "content": []}]}, "messages"),
    ("/v1/messages/count_tokens", {"messages": MSG}, {"messages": [{"role": "system", "content": "x"}]}, "messages"),
    ("/v1/responses", RESPONSES, {"max_output_tokens": True}, "max_output_tokens"),
    ("/v1/responses", RESPONSES, {"stream": "yes"}, "stream"),
    ("/v1/responses", RESPONSES, {"temperature": -0.1}, "temperature"),
    ("/v1/responses", RESPONSES, {"tools": [{"type": "teleport", "name": "x"}]}, "tools"),
    ("/v1/responses", RESPONSES, {"tool_choice": {"function": {}}}, "tool_choice"),
    ("/v1/responses", RESPONSES, {"text": {"format": {"type": "json_schema"}}}, "text.format"),
    ("/v1/responses", RESPONSES, {"input": []}, "input"),
    ("/v1/responses", RESPONSES, {"input": [{"type": "reasoning", "summary": []}]}, "input"),
    ("/v1/responses", RESPONSES, {"instructions": "only this", "input": []}, "input"),
    ("/v1/completions", COMPLETIONS, {"max_tokens": True}, "max_tokens"),
    ("/v1/completions", COMPLETIONS, {"echo": "yes"}, "echo"),
    ("/v1/completions", COMPLETIONS, {"stream": 1}, "stream"),
    ("/v1/completions", COMPLETIONS, {"logprobs": True}, "logprobs"),
    ("/v1/completions", COMPLETIONS, {"prompt": [1, True, 3]}, "prompt"),
    ("/v1/completions", COMPLETIONS, {"temperature": "0.5"}, "temperature"),
]


@pytest.mark.parametrize(("path", "valid", "change", "field"), BAD, ids=[f"{p}-{json.dumps(c)[:40]}" for p, _, c, _ in BAD])
def test_wrong_types_and_ranges_are_400s_that_name_the_field(stack, path, valid, change, field):
    live, _, _ = stack
    assert post(live, path, valid, key="k-valid").status_code == 200  # the body before the change is fine
    key = f"k-bad-{path}-{json.dumps(change)}"  # one session per case: nothing of another case in it
    r = post(live, path, {**valid, **change}, key=key)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert message.startswith(field), message
    assert key not in live.state.by_key or not recorded(stack, key)


def test_admin_bodies_are_strict(stack):
    live, _, _ = stack
    admin = {"Authorization": "Bearer admin-secret"}
    made = httpx.post(f"{live.url}/admin/sessions", headers=admin, json={}).json()
    for body, field in (({"rewards": {"r": True}}, "rewards.r"), ({"rewards": {"r": "1"}}, "rewards.r"),
                        ({"status": "done"}, "status")):
        r = httpx.post(f"{live.url}/admin/sessions/{made['session']}/finish", headers=admin, json=body)
        assert r.status_code == 400 and r.json()["error"]["message"].startswith(field), r.text
    for body, field in (({"task_id": ""}, "task_id"), ({"scaffold": ""}, "scaffold"), ({"task_id": 7}, "task_id")):
        r = httpx.post(f"{live.url}/admin/sessions", headers=admin, json=body)  # an empty task_id was a 500 (the pool refused it)
        assert r.status_code == 400 and r.json()["error"]["message"].startswith(field), r.text
    r = httpx.post(f"{live.url}/admin/sessions/{made['session']}/finish", headers=admin, json={"rewards": {"r": 1}})
    assert r.status_code == 200 and live.state.pool.trajectory(made["trajectory_id"]).rewards == {"r": 1.0}


# ---- the OpenAPI document ---------------------------------------------------------------------------------

BODIES = {
    "/v1/chat/completions": ChatCompletionRequest, "/v1/messages": MessagesRequest, "/v1/messages/count_tokens": CountTokensRequest,
    "/v1/responses": ResponsesRequest, "/v1/completions": CompletionRequest, "/admin/sessions": SessionRequest,
    "/admin/sessions/{session_id}/finish": FinishSession, "/admin/weights": LoadWeights,
    "/v1beta/models/{model}:generateContent": gemini.GenerateContentRequest,
    "/v1beta/models/{model}:streamGenerateContent": gemini.GenerateContentRequest,
    "/v1beta/models/{model}:countTokens": gemini.CountTokensRequest,
    "/api/chat": ollama.ChatRequest, "/api/generate": ollama.GenerateRequest, "/api/show": ollama.ShowRequest,
}


def _resolve(schema, components, seen=()):
    """``schema`` with every ``$ref`` to ``components`` replaced by what it names (recursive refs kept)."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            name = ref.rsplit("/", 1)[1]
            return {"$ref": name} if name in seen else _resolve(components[name], components, (*seen, name))
        return {k: _resolve(v, components, seen) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_resolve(v, components, seen) for v in schema]
    return schema


def _model_schema(model):
    """The model's own JSON schema, on its own (its definitions inlined)."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    return _resolve(schema, schema.pop("$defs", {}))


def test_openapi_documents_every_post_body_from_its_model(stack):
    live, _, _ = stack
    doc = httpx.get(f"{live.url}/openapi.json").json()
    components = doc["components"]["schemas"]
    posts = {path for path, item in doc["paths"].items() if "post" in item}
    app_posts = {r.path for r in create_app(live.state).routes
                 if "POST" in getattr(r, "methods", ()) and getattr(r, "include_in_schema", True)}
    assert posts == app_posts  # every POST endpoint is documented (but Gemini's catch-all 404 for other methods)
    for path in posts:
        body = doc["paths"][path]["post"].get("requestBody")
        bare = path.removeprefix("/s/{session}")
        if bare in ("/admin/pause", "/admin/resume"):
            assert body is None
            continue
        served = _resolve(body["content"]["application/json"]["schema"], components)
        assert served == _model_schema(BODIES[bare]), path
    assert doc["paths"]["/v1/messages"]["post"]["requestBody"]["required"] is True
    assert doc["paths"]["/admin/sessions"]["post"]["requestBody"]["required"] is False
    chat = components["ChatCompletionRequest"]["properties"]
    assert chat["max_tokens"]["anyOf"][0] == {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}
    assert {"/health", "/metrics", "/v1/models", "/"} <= {p for p, item in doc["paths"].items() if "get" in item}


# ---- what the engine is told ----------------------------------------------------------------------------


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.mark.parametrize(("path", "body", "expected"), [
    ("/v1/chat/completions", {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"name": "place", "schema": SCHEMA,
                                                                                                  "strict": True}}},
     {"type": "json_schema", "name": "place", "schema": SCHEMA, "strict": True}),
    ("/v1/chat/completions", {**CHAT, "response_format": {"type": "json_object"}},
     {"type": "json_object", "name": None, "schema": None, "strict": None}),
    ("/v1/chat/completions", {**CHAT, "response_format": {"type": "text"}}, None),
    ("/v1/responses", {**RESPONSES, "text": {"format": {"type": "json_schema", "name": "place", "schema": SCHEMA}}},
     {"type": "json_schema", "name": "place", "schema": SCHEMA, "strict": None}),
    ("/v1/messages", {**MESSAGES, "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}},
     {"type": "json_schema", "name": None, "schema": SCHEMA, "strict": None}),
    ("/v1/messages", {**MESSAGES, "stream": True, "output_format": {"type": "json_schema", "schema": SCHEMA}},
     {"type": "json_schema", "name": None, "schema": SCHEMA, "strict": None}),
])
def test_structured_output_reaches_the_policy_and_the_record(stack, path, body, expected):
    live, policy, _ = stack
    key = f"k-fmt-{len(policy.contexts)}"
    r = post(live, path, body, key=key)
    assert r.status_code == 200, r.text
    assert policy.contexts[-1]["output_format"] == expected
    [c] = recorded(stack, key)
    assert c.sampling.output_format == expected


def test_assistant_tool_calls_reach_the_policy(stack):
    live, policy, _ = stack
    chat_history = [{"role": "user", "content": "list"},
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}]
    assert post(live, "/v1/chat/completions", {"messages": chat_history, "tools": [BASH]}).status_code == 200
    turn = policy.contexts[-1]["messages"][1]
    assert turn["role"] == "assistant" and turn["tool_calls"] == [{"id": "c1", "name": "bash", "arguments": {"command": "ls"}}]
    history = [{"role": "user", "content": "list"},
               {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}]}]
    tools = [{"name": "bash", "input_schema": {"type": "object", "properties": {}}}]
    assert post(live, "/v1/messages", {"messages": history, "tools": tools, "max_tokens": 8}).status_code == 200
    messages = policy.contexts[-1]["messages"]
    assert messages[1]["tool_calls"] == [{"id": "t1", "name": "bash", "arguments": {"command": "ls"}}]
    assert "tool_calls" not in messages[0] and messages[2] == {"role": "tool", "content": "a.txt"}
    assert policy.contexts[-1]["output_format"] is None


# ---- n > 1 ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3])
def test_every_choice_has_its_own_index(stack, n):
    live, policy, _ = stack
    policy.replies += [f"reply {i}" for i in range(n)]
    chat = post(live, "/v1/chat/completions", {**CHAT, "n": n, "logprobs": True, "top_logprobs": 2, "max_tokens": 16},
                key=f"k-n{n}").json()
    assert [c["index"] for c in chat["choices"]] == list(range(n))
    assert [c["message"]["content"] for c in chat["choices"]] == [f"reply {i}" for i in range(n)]
    policy.replies += [f"reply {i}" for i in range(n)]
    legacy = post(live, "/v1/completions", {**COMPLETIONS, "max_tokens": 16, "n": n, "logprobs": 2}, key=f"k-c{n}").json()
    assert [c["index"] for c in legacy["choices"]] == list(range(n))
    assert [c["text"] for c in legacy["choices"]] == [f"reply {i}" for i in range(n)]
    for path, body in (("/v1/chat/completions", {**CHAT, "n": n, "stream": True}), ("/v1/completions", {**COMPLETIONS, "n": n,
                                                                                                      "stream": True, "logprobs": 1})):
        with httpx.stream("POST", f"{live.url}{path}", json=body, headers={"Authorization": "Bearer k-s"}) as resp:
            events = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: {")]
        indices = [c["index"] for e in events for c in e["choices"]]
        assert sorted(set(indices)) == list(range(n)) and indices == sorted(indices), path

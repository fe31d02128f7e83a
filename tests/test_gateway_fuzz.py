"""Random and adversarial bodies posted to every endpoint: never a 5xx, always the provider's error
shape on a 4xx, a stream that ends as its API says, and a healthy gateway afterwards.

Bodies are random JSON, or valid requests of each endpoint with a few parts changed: wrong types,
huge, negative and non-finite numbers, lone surrogates, deep nesting, long text, missing fields.
They go out as raw bytes (``NaN`` literals and ``\\ud800`` escapes included), as a client may send.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from forge_cli.engine.scripted import ScriptedEngine
from forge_cli.gateway.state import GatewayState
from forge_cli.pool.store import DataPool
from tests.conftest import LiveGateway, tool_formats
from tests.test_gateway_gemini import FUZZ_VALID as GEMINI_VALID
from tests.test_gateway_gemini import gemini_error_ok, gemini_stream_ok
from tests.test_gateway_ollama import FUZZ_VALID as OLLAMA_VALID
from tests.test_gateway_ollama import ollama_error_ok

BASH = {"type": "function", "function": {"name": "bash", "description": "Run.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
CALL = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
VALID: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {
        "model": "forge", "max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "n": 1, "stop": ["zz"], "seed": 1,
        "logprobs": True, "top_logprobs": 2, "stream": False, "tools": [BASH], "tool_choice": "auto",
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}},
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                     {"role": "assistant", "content": None, "tool_calls": [
                         {"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
                     {"role": "tool", "tool_call_id": "c", "content": "a.txt"}],
    },
    "/v1/responses": {
        "model": "forge", "instructions": "be brief", "max_output_tokens": 8, "temperature": 1, "stream": False,
        "tools": [{"type": "function", "name": "bash", "parameters": BASH["function"]["parameters"]},
                  {"type": "custom", "name": "patch"}, {"type": "web_search"}],
        "tool_choice": {"type": "function", "name": "bash"}, "text": {"format": {"type": "json_schema", "name": "x", "schema": SCHEMA}},
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                  {"type": "function_call", "call_id": "c", "name": "bash", "arguments": '{"command": "ls"}'},
                  {"type": "function_call_output", "call_id": "c", "output": "a.txt"}],
    },
    "/v1/messages": {
        "model": "forge", "max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "stop_sequences": ["zz"], "stream": False,
        "system": [{"type": "text", "text": "s"}], "tool_choice": {"type": "auto"},
        "tools": [{"name": "bash", "input_schema": BASH["function"]["parameters"]}],
        "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}},
        "messages": [{"role": "user", "content": "hi"},
                     {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "bash", "input": {"command": "ls"}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "a.txt"}]}],
    },
    "/v1/messages/count_tokens": {
        "model": "forge", "system": "s", "tools": [{"name": "bash", "input_schema": BASH["function"]["parameters"]}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    },
    "/v1/completions": {"model": "forge", "prompt": "hello", "max_tokens": 8, "logprobs": 1, "n": 1, "echo": True, "stream": False},
    "/admin/sessions": {"task_id": "t", "scaffold": "s", "tool_format": "hermes"},
    "/admin/sessions/{id}/finish": {"status": "failed", "rewards": {"r": 1.0}, "error": "e"},
    "/admin/weights": {"path": "no-such-folder"},
    **GEMINI_VALID,  # the Gemini API (generateContent, streamGenerateContent?alt=sse, countTokens)
    **OLLAMA_VALID,  # the Ollama API (/api/chat, /api/generate)
}
WORDS = ["user", "assistant", "system", "tool", "developer", "function", "text", "tool_use", "tool_result", "function_call",
         "function_call_output", "custom", "namespace", "message", "auto", "required", "any", "none", "json_schema", "hermes"]


def _deep(n: int) -> Any:
    value: Any = "x"
    for i in range(n):
        value = [value] if i % 2 else {"a": value}
    return value


_leaf = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.sampled_from([0, -1, 2**31, 2**63, 10**30])
         | st.floats() | st.text(max_size=12) | st.sampled_from(WORDS) | st.just("\ud800") | st.just("a\udfffb")
         | st.integers(60, 80).map(_deep) | st.integers(1, 300_000).map(lambda n: "x" * n))
_json = st.recursive(_leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8) | st.sampled_from(WORDS),
                                                                                       inner, max_size=4), max_leaves=10)


def _places(value: Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _places(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _places(v, (*path, i))
    return out


def _mutate(body: Any, path: tuple, op: str, new: Any) -> Any:
    if not path:
        return new if op == "replace" else body
    parent = body
    for part in path[:-1]:
        parent = parent[part]
    if op == "delete":
        del parent[path[-1]]
    elif op == "wrap":
        parent[path[-1]] = [parent[path[-1]]]
    else:
        parent[path[-1]] = new
    return body


def _like(value: Any) -> st.SearchStrategy:
    """A value of the same JSON type as ``value`` (mostly), often an extreme one."""
    if isinstance(value, bool):
        return st.booleans() | st.sampled_from(["yes", 1, 0])
    if isinstance(value, int):
        return st.integers(-3, 40) | st.sampled_from([2**31, 2**63, 10**30, -(2**63)]) | st.sampled_from([True, 4.0, "4"])
    if isinstance(value, float):
        return st.floats() | st.sampled_from([0.0, 1.0, 2.0, 2.0001, -0.0, 1e308]) | st.just(True)
    if isinstance(value, str):
        return (st.text(max_size=20) | st.sampled_from(WORDS) | st.just("\ud800") | st.just("x\udc00")
                | st.integers(1, 300_000).map(lambda n: "ab " * n))
    return _json


@st.composite
def mutated(draw, endpoint: str, changes: int = 3, ops: tuple[str, ...] = ("like", "like", "like", "replace", "delete", "wrap")) -> Any:
    body = json.loads(json.dumps(VALID[endpoint]))
    for _ in range(draw(st.integers(1, changes))):
        places = _places(body)[1:]  # not the root: random JSON covers whole bodies
        if not places:
            break
        place = draw(st.sampled_from(places))
        op = draw(st.sampled_from(ops))
        old = body
        for part in place:
            old = old[part]
        new = draw(_like(old) if op == "like" else _json)
        body = _mutate(body, place, "replace" if op == "like" else op, new)
        if not isinstance(body, (dict, list)):
            break
    return body


def _raw(body: Any) -> bytes:
    return json.dumps(body).encode()  # NaN/Infinity literals, surrogates as \ud800 escapes


_endpoints = st.sampled_from([e for e in sorted(VALID) if e.startswith(("/v1", "/api"))] * 3
                             + [e for e in sorted(VALID) if e.startswith("/admin")])
_bodies = (_endpoints.flatmap(lambda e: st.tuples(st.just(e), mutated(e).map(_raw)))
           | _endpoints.flatmap(lambda e: st.tuples(st.just(e), mutated(e, 1, ("like",)).map(_raw)))  # mostly still valid
           | st.tuples(_endpoints, _json.map(_raw))
           | st.tuples(_endpoints, st.binary(max_size=64))
           | _endpoints.flatmap(lambda e: st.tuples(st.just(e), st.integers(0, 200).map(lambda n: _raw(VALID[e])[:n]))))


@pytest.fixture(scope="module")
def gateway(tiny_model, tmp_path_factory):
    def policy(context):  # some answers carry a tool call, so the parsers run on fuzzed requests too
        return CALL if len(context.get("messages") or []) % 2 else "fine"

    engine = ScriptedEngine(tiny_model, policy)
    pool = DataPool.sqlite(tmp_path_factory.mktemp("fuzz") / "pool.sqlite")
    live = LiveGateway(GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, admin_key="admin-secret"))
    client = httpx.Client(timeout=60)
    made = client.post(f"{live.url}/admin/sessions", headers={"Authorization": "Bearer admin-secret"}, json={}).json()
    yield live, client, made["session"]
    client.close()
    live.stop()
    pool.close()


def _check_shape(path: str, r: httpx.Response) -> None:
    if path.startswith("/v1beta/"):
        assert gemini_error_ok(r), r.text[:300]
        return
    if path.startswith("/api/"):
        assert ollama_error_ok(r), r.text[:300]
        return
    data = r.json()
    if "/v1/messages" in path:
        assert data["type"] == "error" and isinstance(data["error"]["type"], str) and isinstance(data["error"]["message"], str)
    else:
        err = data["error"]
        assert isinstance(err["message"], str) and isinstance(err["type"], str) and set(err) == {"message", "type", "param", "code"}


def _check_stream(path: str, text: str) -> None:
    if path.startswith("/v1beta/"):
        assert gemini_stream_ok(text), text[-300:]
        return
    if path.startswith("/api/"):  # NDJSON: its last line is done, or an error
        last = json.loads(text.strip().splitlines()[-1])
        assert last.get("done") is True or isinstance(last.get("error"), str), text[-300:]
        return
    data = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    if path in ("/v1/chat/completions", "/v1/completions"):
        assert data[-1] == "[DONE]"
    elif path == "/v1/messages":
        assert json.loads(data[-1])["type"] == "message_stop"
    else:
        assert json.loads(data[-1])["type"] in ("response.completed", "response.incomplete")


def test_the_valid_bodies_are_valid(gateway):
    """The mutations start from requests the gateway answers with a 200 (stream and not)."""
    live, client, _ = gateway
    session = client.post(f"{live.url}/admin/sessions", headers={"Authorization": "Bearer admin-secret"}, json={}).json()["session"]
    for endpoint, body in VALID.items():
        path = endpoint.replace("{id}", session)
        key = "admin-secret" if path.startswith("/admin") else "fuzz-valid"
        r = client.post(f"{live.url}{path}", json=body, headers={"Authorization": f"Bearer {key}", "x-api-key": key})
        expected = 400 if endpoint == "/admin/weights" else 200  # no such folder: the weights are untouched
        assert r.status_code == expected, (endpoint, r.text[:300])
        if "stream" in body:
            streamed = client.post(f"{live.url}{path}", json={**body, "stream": True}, headers={"Authorization": f"Bearer {key}",
                                                                                               "x-api-key": key})
            assert streamed.status_code == 200
            _check_stream(endpoint, streamed.text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                                    HealthCheck.data_too_large])
@given(case=_bodies)
def test_no_body_gets_a_5xx(gateway, case):
    live, client, session = gateway
    endpoint, body = case
    path = endpoint.replace("{id}", session)
    key = "admin-secret" if path.startswith("/admin") else "fuzz"
    r = client.post(f"{live.url}{path}", content=body, headers={"Authorization": f"Bearer {key}", "x-api-key": key,
                                                                "content-type": "application/json"})
    assert r.status_code < 500, (path, body[:300], r.text[:300])
    event(f"{endpoint} {r.status_code}")  # pytest --hypothesis-show-statistics: what the examples reached
    if r.status_code >= 400:
        _check_shape(path, r)
    elif r.headers["content-type"].startswith(("text/event-stream", "application/x-ndjson")):
        _check_stream(path, r.text)
    else:
        r.json()
    assert client.get(f"{live.url}/health").json()["status"] == "ok"

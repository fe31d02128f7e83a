"""Sessions and auth, bad input in the provider's error shape, and pause/resume around weight updates."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import openai
import pytest

from forge_cli.engine.hf import HFEngine
from forge_cli.gateway.state import GatewayState
from forge_cli.pool.store import DataPool
from tests.conftest import LiveGateway, tool_formats
from tests.waiting import wait_until

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def engine(tiny_model):
    eng = HFEngine(tiny_model, max_model_len=512)
    yield eng
    asyncio.run(eng.close())


def _gateway(engine, tmp_path, auth):
    pool = DataPool.sqlite(tmp_path / f"pool-{auth}.sqlite")
    state = GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, auth=auth, admin_key="admin-secret")
    return LiveGateway(state), pool


@pytest.fixture
def loopback(engine, tmp_path):
    live, pool = _gateway(engine, tmp_path, "loopback")
    yield live, pool
    live.stop()
    pool.close()


@pytest.fixture
def strict(engine, tmp_path):
    live, pool = _gateway(engine, tmp_path, "strict")
    yield live, pool
    live.stop()
    pool.close()


def test_loopback_each_key_is_its_own_session(loopback):
    live, pool = loopback
    for key in ("a", "b", "a"):
        live.openai(key).chat.completions.create(model="forge", messages=MSG, max_tokens=3)
    state = live.state
    ta, tb = state.sessions[state.by_key["a"]].trajectory_id, state.sessions[state.by_key["b"]].trajectory_id
    assert ta != tb
    assert len(pool.trajectory(ta).completions) == 2 and len(pool.trajectory(tb).completions) == 1


def test_strict_needs_issued_keys(strict):
    live, pool = strict
    for key in ("unknown", ""):
        with pytest.raises(openai.AuthenticationError) as info:
            live.openai(key or "x", default_headers={"Authorization": ""} if not key else None).chat.completions.create(
                model="forge", messages=MSG, max_tokens=3)
        assert info.value.status_code == 401
    assert httpx.post(f"{live.url}/admin/sessions", json={}).status_code == 401
    made = httpx.post(f"{live.url}/admin/sessions", headers={"Authorization": "Bearer admin-secret"},
                      json={"task_id": "t1", "scaffold": "react"}).json()
    r = live.openai(made["api_key"]).chat.completions.create(model="forge", messages=MSG, max_tokens=3)
    assert r.choices[0].message.content is not None
    assert len(pool.trajectory(made["trajectory_id"]).completions) == 1
    # the /s/<session>/v1 base URL, for clients that cannot set headers
    from openai import OpenAI

    OpenAI(base_url=made["base_url"], api_key="anything", max_retries=0).chat.completions.create(model="forge", messages=MSG, max_tokens=3)
    assert len(pool.trajectory(made["trajectory_id"]).completions) == 2
    # another session's key cannot write into this one
    other = httpx.post(f"{live.url}/admin/sessions", headers={"Authorization": "Bearer admin-secret"}, json={}).json()
    bad = httpx.post(f"{made['base_url']}/chat/completions", headers={"Authorization": f"Bearer {other['api_key']}"},
                     json={"messages": MSG, "max_tokens": 3})
    assert bad.status_code == 403 and bad.json()["error"]["type"] == "permission_error"
    assert len(pool.trajectory(made["trajectory_id"]).completions) == 2
    assert len(pool.trajectory(other["trajectory_id"]).completions) == 0


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "must be a JSON object"),
        (json.dumps({"messages": "hi"}).encode(), 400, "messages: Input should be a valid list"),
        (json.dumps({"messages": [{"role": "robot", "content": "x"}]}).encode(), 400, "messages[0].role"),
        (json.dumps({"messages": MSG, "temperature": "hot"}).encode(), 400, "temperature"),
        (json.dumps({"messages": MSG, "max_tokens": 0}).encode(), 400, "max_tokens"),
        (json.dumps({"messages": []}).encode(), 400, "messages: List should have at least 1 item"),
        (json.dumps({"messages": MSG, "tools": [{"type": "function", "function": {"name": "x", "parameters": {"type": "array"}}}]}).encode(),
         400, "parameters must be a JSON schema of type 'object'"),
        (json.dumps({"messages": MSG, "tools": [{"type": "function", "function": {"name": f"t{i}"}} for i in range(10_000)]}).encode(),
         400, "10000 tools given"),
        (json.dumps({"messages": MSG, "tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": []}).encode(),
         400, "tool_choice"),
        (json.dumps({"messages": [{"role": "user", "content": "word " * 2000}]}).encode(), 400, "this model's context is 512 tokens"),
        # a union's alternatives at one field, in words (not pydantic's member tags); other fields named
        (json.dumps({"messages": MSG, "tool_choice": "bogus"}).encode(), 400,
         "tool_choice: Input should be 'auto', 'required' or 'none', or a valid dictionary"),
        (json.dumps({"messages": [{"role": "robot", "content": "x"}], "n": 0}).encode(), 400, "(got 'robot'); also wrong: n"),
        (json.dumps({"messages": MSG, "max_tokens": -1}).encode(), 400, "(got -1)"),
        (json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}).encode(),
         400, "content part type 'image_url' is not supported"),
    ],
)
def test_bad_input_is_a_4xx_in_openai_shape(loopback, body, status, needle):
    live, _ = loopback
    r = httpx.post(f"{live.url}/v1/chat/completions", content=body, headers={"content-type": "application/json", "Authorization": "Bearer t"},
                   timeout=120)  # a 10,000-tool body on a loaded machine: not a test of speed
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert needle in err["message"] and err["type"] == "invalid_request_error"


def test_huge_body_is_413(loopback):
    live, _ = loopback
    body = b'{"messages": [{"role": "user", "content": "' + b"x" * (50 * 1024 * 1024) + b'"}]}'
    r = httpx.post(f"{live.url}/v1/chat/completions", content=body, headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 413 and "limit" in r.json()["error"]["message"]


def test_unknown_endpoint_is_404_json(loopback):
    live, _ = loopback
    r = httpx.post(f"{live.url}/v1/nothing", json={})
    assert r.status_code == 404 and r.json()["error"]["message"].startswith("no endpoint")


def test_pause_resume_and_weight_update_lose_nothing(loopback, tmp_path, monkeypatch):
    live, pool = loopback
    admin = {"Authorization": "Bearer admin-secret"}
    assert httpx.post(f"{live.url}/admin/pause", headers=admin).json()["paused"] is True
    results: list = []
    arrived: list[int] = []  # requests that reached the engine (and wait at its pause)
    engine, generate = live.state.engine, live.state.engine.generate
    monkeypatch.setattr(engine, "generate", lambda *a, **kw: arrived.append(1) or generate(*a, **kw))

    def call(i: int) -> None:
        r = httpx.post(f"{live.url}/v1/chat/completions", headers={"Authorization": f"Bearer p{i}"},
                       json={"messages": MSG, "max_tokens": 4}, timeout=60)
        results.append((r.status_code, r.json()["system_fingerprint"]))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    wait_until(lambda: len(arrived) == 8, what="the 8 requests to reach the paused engine")
    assert results == []  # they wait while paused
    # new weights while paused: a perturbed copy of the model's own
    import torch
    from safetensors.torch import save_file

    sd = {k: (v + 0.01 * torch.randn_like(v)).contiguous() for k, v in live.state.engine.model.state_dict().items()}
    save_file(sd, str(tmp_path / "model.safetensors"))
    assert httpx.post(f"{live.url}/admin/weights", headers=admin, json={"path": str(tmp_path)}, timeout=60).json()["version"] == 1
    httpx.post(f"{live.url}/admin/resume", headers=admin)
    for t in threads:
        t.join(timeout=60)
    assert sorted(results) == [(200, "forge-v1")] * 8
    state = live.state
    versions = [pool.trajectory(state.sessions[state.by_key[f"p{i}"]].trajectory_id).completions[0].policy_version for i in range(8)]
    assert versions == [1] * 8


def test_weights_that_do_not_fit_are_a_400_and_leave_the_model_untouched(loopback, tmp_path):
    """Checked before the first tensor is copied: a half-loaded model would sample under a version
    that says nothing changed."""
    import torch
    from safetensors.torch import save_file

    live, _ = loopback
    admin = {"Authorization": "Bearer admin-secret"}
    model = live.state.engine.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    version = live.state.engine.version
    good = {k: torch.zeros_like(v).contiguous() for k, v in before.items() if k != "lm_head.weight"}
    embed = "model.embed_tokens.weight"
    cases = {
        "extra": {**good, "bogus": torch.zeros(2)},
        "missing": {k: v for k, v in good.items() if k != embed},
        "shape": {**good, embed: torch.zeros(3, 3)},
    }
    for name, state in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        save_file(state, str(folder / "model.safetensors"))
        r = httpx.post(f"{live.url}/admin/weights", headers=admin, json={"path": str(folder)}, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == "path", (name, r.text)
        assert "do not fit" in r.json()["error"]["message"]
    r = httpx.post(f"{live.url}/admin/weights", headers=admin, json={"path": str(tmp_path / "nowhere")}, timeout=60)
    assert r.status_code == 400 and "no weights folder" in r.json()["error"]["message"]
    assert live.state.engine.version == version
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_on_shutdown_the_trajectories_it_opened_fail_unless_finished(strict):
    live, pool = strict
    admin = {"Authorization": "Bearer admin-secret"}
    left, done = (httpx.post(f"{live.url}/admin/sessions", headers=admin).json() for _ in range(2))
    httpx.post(f"{live.url}/admin/sessions/{done['session']}/finish", headers=admin, json={"rewards": {"outcome": 1.0}})
    driver = pool.submit_group("task", 1, "react").trajectories[0].id  # a rollout driver's: not the gateway's to end
    httpx.post(f"{live.url}/admin/sessions", headers=admin, json={"trajectory_id": driver})
    assert live.state.close() == 1
    assert pool.trajectory(left["trajectory_id"]).status == "failed"
    assert "gateway stopped" in pool.trajectory(left["trajectory_id"]).error
    assert pool.trajectory(done["trajectory_id"]).status == "completed"
    assert pool.trajectory_status(driver) == "running"


def test_finish_needs_no_body(strict):
    live, pool = strict
    admin = {"Authorization": "Bearer admin-secret"}
    made = httpx.post(f"{live.url}/admin/sessions", headers=admin).json()
    done = httpx.post(f"{live.url}/admin/sessions/{made['session']}/finish", headers=admin)
    assert done.status_code == 200, done.text
    assert pool.trajectory(made["trajectory_id"]).status == "completed"


def test_a_closed_trajectory_refuses_more_calls_with_409(strict):
    live, pool = strict
    admin = {"Authorization": "Bearer admin-secret"}
    made = httpx.post(f"{live.url}/admin/sessions", headers=admin, json={}).json()
    key = {"Authorization": f"Bearer {made['api_key']}"}
    assert httpx.post(f"{live.url}/v1/chat/completions", headers=key, json={"messages": MSG, "max_tokens": 2}).status_code == 200
    done = httpx.post(f"{live.url}/admin/sessions/{made['session']}/finish", headers=admin, json={"rewards": {"outcome": 1.0}})
    assert done.status_code == 200 and pool.trajectory(made["trajectory_id"]).reward == 1.0
    again = httpx.post(f"{live.url}/v1/chat/completions", headers=key, json={"messages": MSG, "max_tokens": 2})
    assert again.status_code == 409 and "can no longer record" in again.json()["error"]["message"]
    # a session bound to a finished trajectory is refused up front
    bad = httpx.post(f"{live.url}/admin/sessions", headers=admin, json={"trajectory_id": made["trajectory_id"]})
    assert bad.status_code == 409


def test_admin_key_with_odd_bytes_is_401(strict):
    live, _ = strict
    r = httpx.post(f"{live.url}/admin/pause", headers={"x-api-key": "\xe9t\xe9".encode("latin-1")})
    assert r.status_code == 401


def test_chunked_huge_body_is_413(loopback):
    live, _ = loopback

    def body():
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(20):
            yield b"x" * (1024 * 1024)
        yield b'"}]}'

    r = httpx.post(f"{live.url}/v1/chat/completions", content=body(), headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 413


@pytest.mark.parametrize(("path", "body", "needle"), [
    ("/v1/chat/completions", {"messages": MSG, "seed": 2**64 + 5}, "seed"),
    ("/v1/responses", {"input": [{"role": ["x"], "content": "hi"}]}, "must be strings"),
    ("/v1/responses", {"input": "hi", "tools": [{"type": ["x"], "name": "a"}]}, "type: must be a string"),
    ("/v1/responses", {"input": "hi", "tool_choice": {"type": "function", "name": ["a"]}}, "tool_choice"),
    ("/v1/responses", {"input": "hi", "tools": [{"type": "namespace", "name": "ns", "tools": ["x"]}]}, "a tool must be an object"),
])
def test_odd_types_are_400(loopback, path, body, needle):
    live, _ = loopback
    r = httpx.post(f"{live.url}{path}", json=body, headers={"Authorization": "Bearer odd"})
    assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text

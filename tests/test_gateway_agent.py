"""The ``x-forge-agent`` header: which agent of a trajectory made a call (an orchestrator and its
workers), recorded as the completion's ``agent`` on every generation endpoint, seen by a scripted
policy, and refused with a 400 (nothing recorded) when it is not a short printable name."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from forge_cli.engine.scripted import ScriptedEngine
from forge_cli.gateway.state import GatewayState
from forge_cli.pool.store import DataPool
from tests.conftest import LiveGateway, tool_formats

MSG = [{"role": "user", "content": "hi"}]
BODIES = {
    "/v1/chat/completions": {"messages": MSG},
    "/v1/chat/completions stream": {"messages": MSG, "stream": True},
    "/v1/messages": {"messages": MSG, "max_tokens": 16},
    "/v1/messages stream": {"messages": MSG, "max_tokens": 16, "stream": True},
    "/v1/responses": {"input": "hi"},
    "/v1/completions": {"prompt": "hi"},
}


def says_who(context):
    """A scripted policy that answers with the agent it was told."""
    return f"agent={context['agent']}"


@pytest.fixture(scope="module")
def engine(tiny_model):
    eng = ScriptedEngine(tiny_model, says_who, max_model_len=512)
    yield eng
    asyncio.run(eng.close())


@pytest.fixture
def gateway(engine, tmp_path):
    pool = DataPool.sqlite(tmp_path / "pool.sqlite")
    live = LiveGateway(GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, auth="loopback"))
    yield live, pool
    live.stop()
    pool.close()


def _completions(live, pool, key):
    return pool.trajectory(live.state.sessions[live.state.by_key[key]].trajectory_id).completions


@pytest.mark.parametrize("endpoint", list(BODIES))
def test_the_agent_header_is_recorded_on_every_endpoint(gateway, endpoint):
    live, pool = gateway
    path = endpoint.split()[0]
    for agent in ("orchestrator", "worker-2", None, "sub agent:7/a.b"):
        headers = {"Authorization": "Bearer k"} | ({"x-forge-agent": agent} if agent else {})
        r = httpx.post(live.url + path, json=BODIES[endpoint], headers=headers, timeout=60)
        assert r.status_code == 200, r.text
        assert f"agent={agent}" in r.text  # the policy was told which agent asked
    assert [c.agent for c in _completions(live, pool, "k")] == ["orchestrator", "worker-2", None, "sub agent:7/a.b"]


def test_the_agent_header_through_the_openai_client(gateway):
    live, pool = gateway
    client = live.openai("k2", default_headers={"x-forge-agent": "worker-0"})
    reply = client.chat.completions.create(model="forge", messages=MSG)
    assert reply.choices[0].message.content == "agent=worker-0"
    assert [c.agent for c in _completions(live, pool, "k2")] == ["worker-0"]


@pytest.mark.parametrize("value", ["", "x" * 65, "w\u00f6rker".encode("utf-8"), b"tab\there"])
def test_a_bad_agent_header_is_a_400_and_records_nothing(gateway, value):
    live, pool = gateway
    r = httpx.post(live.url + "/v1/chat/completions", json={"messages": MSG},
                   headers=[(b"authorization", b"Bearer bad"), (b"x-forge-agent", value if isinstance(value, bytes) else value.encode())],
                   timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "x-forge-agent" and "printable ASCII" in error["message"]
    assert "bad" not in live.state.by_key  # refused before any session was opened


def test_two_agent_headers_are_a_400(gateway):
    live, _ = gateway
    r = httpx.post(live.url + "/v1/chat/completions", json={"messages": MSG},
                   headers=[("authorization", "Bearer two"), ("x-forge-agent", "a"), ("x-forge-agent", "b")], timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "x-forge-agent"
    assert "two" not in live.state.by_key


def test_sixty_four_characters_is_the_limit(gateway):
    live, pool = gateway
    name = "w" * 64
    r = httpx.post(live.url + "/v1/chat/completions", json={"messages": MSG},
                   headers={"Authorization": "Bearer k3", "x-forge-agent": name}, timeout=30)
    assert r.status_code == 200
    assert [c.agent for c in _completions(live, pool, "k3")] == [name]

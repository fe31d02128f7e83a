"""A session's life: who may open one without a key, and what is left of it once its trajectory ends."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from forge_cli.records.session import SessionRequest
from forge_cli.engine.scripted import ScriptedEngine
from forge_cli.gateway.app import create_app
from forge_cli.gateway.state import GatewayState
from forge_cli.pool.store import DataPool
from tests.conftest import tool_formats

PING = {"messages": [{"role": "user", "content": "ping"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def engine(tiny_model, tmp_path_factory):
    policy = tmp_path_factory.mktemp("policy") / "p.json"
    policy.write_text(json.dumps({"rules": [{"when": "ping", "reply": "pong"}], "turns": ["hi"]}))
    eng = ScriptedEngine(tiny_model, policy)
    yield eng
    asyncio.run(eng.close())


def _client(state):
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(state)), base_url="http://127.0.0.1", timeout=60)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer "}, {"Authorization": "Bearer    "}, {"x-api-key": ""}])
def test_loopback_refuses_a_request_with_no_key(engine, tmp_path, headers):
    """All keyless clients would share one trajectory; a 401 says how to pass a key instead."""
    pool = DataPool.sqlite(tmp_path / "pool.sqlite")
    state = GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, auth="loopback")

    async def main():
        async with _client(state) as client:
            r = await client.post("/v1/chat/completions", json=PING, headers=headers)
            assert r.status_code == 401 and "Authorization: Bearer" in r.json()["error"]["message"]
            r = await client.post("/v1/messages", json={**PING, "model": "m"}, headers=headers)
            assert r.status_code == 401 and r.json()["type"] == "error"
            # "anonymous" is a key like any other: its own trajectory, not a shared one
            for key in ("anonymous", "other"):
                r = await client.post("/v1/chat/completions", json=PING, headers={"Authorization": f"Bearer {key}"})
                assert r.status_code == 200

    asyncio.run(main())
    assert len(state.sessions) == 2
    assert len({s.trajectory_id for s in state.sessions.values()}) == 2
    assert sum(len(pool.trajectory(s.trajectory_id).completions) for s in state.sessions.values()) == 2
    pool.close()


def _rss_kib() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


@pytest.mark.slow
def test_ended_sessions_are_forgotten_over_1000_trajectories(engine, tmp_path):
    """Memory stays flat over a long rollout: a finished session leaves no history, no table entry."""
    pool = DataPool.sqlite(tmp_path / "pool.sqlite")
    state = GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, auth="strict", admin_key="admin")
    admin = {"Authorization": "Bearer admin"}
    rss = []

    async def one(client, i):
        r = await client.post("/admin/sessions", json={"task_id": f"t{i}"}, headers=admin)
        session, key = r.json()["session"], r.json()["api_key"]
        body = {"messages": [{"role": "user", "content": f"ping {i} " + "x" * 200}], "max_tokens": 4}
        assert (await client.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})).status_code == 200
        assert state.sessions[session].history  # remembered while the trajectory runs (prefix reuse)
        r = await client.post(f"/admin/sessions/{session}/finish", json={"rewards": {"outcome": 1.0}}, headers=admin)
        assert r.status_code == 200
        return session, key

    async def main():
        async with _client(state) as client:
            for i in range(1000):
                session, key = await one(client, i)
                if i in (199, 999):
                    rss.append(_rss_kib())
            # an ended session cannot record again, by its key or by its URL
            r = await client.post("/v1/chat/completions", json=PING, headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 409
            r = await client.post(f"/s/{session}/v1/chat/completions", json=PING)
            assert r.status_code == 409

    asyncio.run(main())
    assert state.sessions == {} and state.by_key == {} and not state._opened
    assert len(state.ended) == 2 * 1000
    assert pool.stats()["trajectories"]["completed"] == 1000
    assert rss[1] - rss[0] < 32 * 1024, rss  # KiB: flat, within allocator noise (under 41 KiB a session)
    pool.close()


def test_a_trajectory_ended_elsewhere_frees_its_session(engine, tmp_path):
    """A driver (or a timeout) can end a trajectory behind the gateway's back: the next call's 409 forgets it."""
    pool = DataPool.sqlite(tmp_path / "pool.sqlite")
    state = GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, auth="loopback")

    async def main():
        async with _client(state) as client:
            headers = {"Authorization": "Bearer k"}
            assert (await client.post("/v1/chat/completions", json=PING, headers=headers)).status_code == 200
            pool.fail_trajectory(state.sessions[state.by_key["k"]].trajectory_id, "stopped by the driver")
            assert (await client.post("/v1/chat/completions", json=PING, headers=headers)).status_code == 409
            assert state.sessions == {}
            # and the key stays ended: not silently a new trajectory on loopback
            assert (await client.post("/v1/chat/completions", json=PING, headers=headers)).status_code == 409

    asyncio.run(main())
    assert sum(pool.stats()["trajectories"].values()) == 1
    pool.close()


def test_a_token_budget_cuts_max_tokens_then_refuses(engine, tmp_path):
    pool = DataPool.sqlite(tmp_path / "pool.sqlite")
    state = GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, auth="strict", admin_key="admin")

    async def main():
        session = await state.create_session(SessionRequest(token_budget=5))
        headers = {"Authorization": f"Bearer {session.api_key}"}
        used = []
        async with _client(state) as client:
            for _ in range(6):
                r = await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hello there"}],
                                                                     "max_tokens": 3}, headers=headers)
                if r.status_code != 200:
                    break
                used.append(r.json()["usage"]["completion_tokens"])
        return session, used, r

    session, used, last = asyncio.run(main())
    assert sum(used) == 5 and all(u <= 3 for u in used)  # each call cut to what was left
    assert last.status_code == 409 and "budget of 5 output tokens is spent" in last.json()["error"]["message"]
    recorded = pool.trajectory(session.trajectory_id).completions
    assert [c.sampling.max_tokens for c in recorded][-1] == 5 - sum(used[:-1])
    pool.close()

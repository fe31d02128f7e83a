"""``serve_gateway``: the gateway composed by a library call, on the caller's event loop."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys

import httpx
import pytest

from forge_cli.records.session import SessionRequest
from forge_cli.config import load_config
from forge_cli.errors import ForgeError


def _config(tmp_path, tiny_model, **more):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"rules": [{"when": "ping", "reply": "pong"}], "turns": ["hello"]}))
    overrides = {"model.path": str(tiny_model), "model.engine.type": "scripted", "model.engine.policy": str(policy),
                 "gateway.port": 0, "run.dir": str(tmp_path / "runs"), **more}
    return load_config(env={}, overrides=overrides)


PING = {"messages": [{"role": "user", "content": "ping"}]}


def test_serve_open_session_record_and_tear_down(tmp_path, tiny_model):
    config = _config(tmp_path, tiny_model)

    async def main():
        async with serve_gateway(config, "r1") as gw:
            info = await gw.open_session(SessionRequest(task_id="t1", scaffold="mine"))
            async with httpx.AsyncClient(base_url=info.base_url, timeout=60) as client:
                r = await client.post("/chat/completions", json=PING, headers={"Authorization": f"Bearer {info.api_key}"})
                assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "pong"
            # the same gateway on its unix socket
            transport = httpx.AsyncHTTPTransport(uds=str(gw.unix_path))
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=60) as client:
                r = await client.post("/v1/chat/completions", json=PING, headers={"Authorization": "Bearer over-socket"})
                assert r.status_code == 200
            traj = gw.pool.trajectory(info.trajectory_id)
            assert traj.task_id == "t1" and len(traj.completions) == 1
            await gw.finish_session(info.id, rewards={"outcome": 1.0})
            assert gw.pool.trajectory_status(info.trajectory_id) == "completed"
            async with httpx.AsyncClient(base_url=f"{gw.url}/v1", timeout=60) as client:
                r = await client.post("/chat/completions", json=PING, headers={"Authorization": f"Bearer {info.api_key}"})
                assert r.status_code == 409  # its trajectory ended
            return gw.unix_path, gw.url

    from forge_cli.gateway.server import serve_gateway

    unix_path, url = asyncio.run(main())
    assert not unix_path.exists()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health")
    # the run lock went with it: the same run can be served again
    asyncio.run(_serve_once(config, "r1"))


async def _serve_once(config, run):
    from forge_cli.gateway.server import serve_gateway

    async with serve_gateway(config, run) as gw:
        async with httpx.AsyncClient(timeout=30) as client:
            assert (await client.get(gw.url + "/health")).status_code == 200


def test_the_port_is_not_listening_until_the_engine_is_up(tmp_path, tiny_model):
    """Bound early (a port in use fails fast) but refusing connections while the engine starts, so
    early clients are told at once instead of queueing for the engine."""
    from forge_cli.gateway.server import serve_gateway

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = _config(tmp_path, tiny_model, **{"gateway.port": port})
    seen = []

    def starting(message):
        with socket.socket() as client:
            seen.append(client.connect_ex(("127.0.0.1", port)))

    async def main():
        async with serve_gateway(config, "r", on_starting=starting) as gw:
            async with httpx.AsyncClient(timeout=30) as client:
                assert (await client.get(gw.url + "/health")).status_code == 200

    asyncio.run(main())
    import errno

    assert seen == [errno.ECONNREFUSED]


def test_a_port_in_use_fails_before_the_engine_starts(tmp_path, tiny_model):
    from forge_cli.gateway.server import serve_gateway

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = _config(tmp_path, tiny_model, **{"gateway.port": taken.getsockname()[1]})
        started = []

        async def main():
            async with serve_gateway(config, "busy", on_starting=started.append):
                pass

        with pytest.raises(ForgeError, match="cannot listen on 127.0.0.1"):
            asyncio.run(main())
    assert started == [] and not (tmp_path / "runs" / "busy").exists()


def test_a_second_gateway_on_one_run_is_refused(tmp_path, tiny_model):
    """Without a socket (whose file used to be the only guard) two servers could share a run."""
    from forge_cli.gateway.server import serve_gateway

    config = _config(tmp_path, tiny_model, **{"gateway.socket": ""})

    async def main():
        async with serve_gateway(config, "shared"):
            with pytest.raises(ForgeError, match="already"):
                async with serve_gateway(config, "shared"):
                    pass
            async with serve_gateway(config, "other"):  # another run is fine
                pass

    asyncio.run(main())


DIE_WHILE_RUNNING = """
import os, sys
from forge_cli.pool.store import DataPool
pool = DataPool.sqlite(sys.argv[1])
group = pool.submit_group("t", 2, "x")
for t in group.trajectories:
    pool.start_trajectory(t.id)
print(" ".join(t.id for t in group.trajectories), flush=True)
os._exit(0)  # dies with both running, like a SIGKILL
"""


def test_start_fails_what_a_dead_process_left_running(tmp_path, tiny_model):
    from forge_cli.gateway.server import serve_gateway

    config = _config(tmp_path, tiny_model)
    run = tmp_path / "runs" / "crashed"
    run.mkdir(parents=True)
    out = subprocess.run([sys.executable, "-c", DIE_WHILE_RUNNING, str(run / "pool.sqlite")], capture_output=True, text=True,
                         check=True).stdout.split()

    async def main():
        async with serve_gateway(config, "crashed") as gw:
            return gw.interrupted, [gw.pool.trajectory(t) for t in out]

    interrupted, trajectories = asyncio.run(main())
    assert interrupted == 2
    assert all(t.status == "failed" and "interrupted" in (t.error or "") for t in trajectories)


def test_an_injected_engine_is_served_and_not_closed(tmp_path, tiny_model):
    """``forge train`` shares its engine with the trainer: the gateway serves it and leaves it open."""
    from forge_cli.engine.scripted import ScriptedEngine
    from forge_cli.gateway.server import serve_gateway

    config = _config(tmp_path, tiny_model)
    policy = tmp_path / "own.json"
    policy.write_text(json.dumps({"rules": [{"when": "ping", "reply": "pong!"}]}))
    engine = ScriptedEngine(tiny_model, policy)
    closed = []
    engine.close = lambda: closed.append(1)  # would be awaited if the gateway closed it

    async def main():
        async with serve_gateway(config, "inj", engine=engine) as gw:
            async with httpx.AsyncClient(timeout=60) as client:
                r = await client.post(gw.url + "/v1/chat/completions", json=PING, headers={"Authorization": "Bearer k"})
                return r.json()["choices"][0]["message"]["content"]

    assert asyncio.run(main()) == "pong!" and closed == []


def test_body_limits_come_from_the_config(tmp_path, tiny_model):
    from forge_cli.gateway.server import serve_gateway

    config = _config(tmp_path, tiny_model, **{"gateway.max_body_bytes": 2048, "gateway.body_timeout_s": 0.5})

    async def main():
        async with serve_gateway(config, "limits") as gw:
            async with httpx.AsyncClient(timeout=30) as client:
                big = {"messages": [{"role": "user", "content": "x" * 4096}]}
                r = await client.post(gw.url + "/v1/chat/completions", json=big, headers={"Authorization": "Bearer k"})
                assert r.status_code == 413
            host, port = gw.url.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
                         b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"messages\"")
            await writer.drain()
            head = await asyncio.wait_for(reader.read(200), timeout=10)  # answered, not hanging
            writer.close()
            assert head.startswith(b"HTTP/1.1 408")

    asyncio.run(main())


def test_a_replica_that_fails_to_start_leaves_none_running(tmp_path, tiny_model, monkeypatch):
    import forge_cli.run as run_context
    from forge_cli.gateway.server import serve_gateway

    config = _config(tmp_path, tiny_model, **{"model.replicas": 3})
    built, closed, real = [], [], run_context.make_engine

    def make(*args, **kw):
        if len(built) == 2:
            raise ForgeError("replica 3 ran out of memory")
        engine = real(*args, **kw)
        engine.close = lambda e=engine: closed.append(e) or asyncio.sleep(0)
        built.append(engine)
        return engine

    monkeypatch.setattr(run_context, "make_engine", make)  # the run context builds the replicas

    async def main():
        async with serve_gateway(config, "replicas"):
            pass

    with pytest.raises(ForgeError, match="replica 3"):
        asyncio.run(main())
    assert len(built) == 2 and sorted(map(id, closed)) == sorted(map(id, built))
    assert not (tmp_path / "runs" / "replicas").exists()


def test_in_process_callers_get_forge_errors_and_ended_sessions_are_dropped(tmp_path, tiny_model):
    from forge_cli.gateway.server import serve_gateway

    config = _config(tmp_path, tiny_model)

    async def main():
        async with serve_gateway(config, "errs") as gw:
            with pytest.raises(ForgeError, match="no tool format named 'nope'"):
                await gw.open_session(SessionRequest(tool_format="nope"))
            info = await gw.open_session()
            gw.pool.fail_trajectory(info.trajectory_id, "timed out elsewhere")
            with pytest.raises(ForgeError, match="failed"):
                await gw.finish_session(info.id)
            assert info.id not in gw.state.sessions  # nothing of it is kept

    asyncio.run(main())


def test_releasing_a_lock_never_removes_a_newer_holders_file(tmp_path):
    import shutil

    from forge_cli.runs import claim_run

    config = load_config(env={}, overrides={"run.dir": str(tmp_path / "runs")})
    first = claim_run(config, "r")
    shutil.rmtree(first.run_dir)  # a failed start removed its new run …
    second = claim_run(config, "r")  # … and another server claimed it anew before the release
    first.release()
    assert second.path.exists()
    with pytest.raises(ForgeError, match="already being served"):
        claim_run(config, "r")
    second.release()


@pytest.mark.parametrize("record", [True, False])
def test_gateway_record_requests_keeps_the_raw_body_only_when_asked(tmp_path, tiny_model, record):
    """``gateway.record_requests``: the call's raw request body is stored with its completion (for
    debugging a client); off, the default, nothing but what training needs is."""
    from forge_cli.gateway.server import serve_gateway

    config = _config(tmp_path, tiny_model, **{"gateway.record_requests": record})

    async def main():
        async with serve_gateway(config, "rec") as gw:
            info = await gw.open_session(SessionRequest(task_id="t1"))
            async with httpx.AsyncClient(base_url=info.base_url, timeout=60) as client:
                r = await client.post("/chat/completions", json={**PING, "temperature": 0.5},
                                      headers={"Authorization": f"Bearer {info.api_key}"})
                assert r.status_code == 200
            return gw.pool.trajectory(info.trajectory_id).completions

    (completion,) = asyncio.run(main())
    assert completion.request == ({**PING, "temperature": 0.5} if record else None)
    assert load_config(env={}).gateway.record_requests is False

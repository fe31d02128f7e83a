"""The run context (``forge_cli/run.py``): a run's folder, lock, pool and engine, apart from any
server; the gateway, the driver and the trainer are its consumers; one session request for every
way a session is opened."""

from __future__ import annotations

import asyncio
import inspect
import json

import pytest

from forge_cli.config import load_config
from forge_cli.errors import ForgeError
from forge_cli.gateway.server import Gateway, serve_run, serve_gateway
from forge_cli.gateway.listen import open_listeners
from forge_cli.pool.types import TrajectoryStatus
from forge_cli.records.session import SessionRequest
from forge_cli.rollout.remote import DriverGateway, RemoteGateway
from forge_cli.run import Run, open_run


def _config(tmp_path, tiny_model):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"rules": [{"when": "ping", "reply": "pong"}], "turns": ["hello"]}))
    return load_config(env={}, overrides={
        "model.path": str(tiny_model), "model.engine.type": "scripted", "model.engine.policy": str(policy),
        "gateway.port": 0, "gateway.socket": "", "run.dir": str(tmp_path / "runs")})


def test_a_run_holds_its_pool_and_engine_without_a_server(tmp_path, tiny_model):
    """The trainer's view: the run's engine samples and its pool records, no HTTP anywhere; a second
    process on the same run is refused while the first holds it."""
    config = _config(tmp_path, tiny_model)

    async def main():
        async with open_run(config, "ctx") as run:
            assert isinstance(run, Run) and run.dir == tmp_path / "runs" / "ctx" and run.version == run.engine.version
            group = run.pool.submit_group("t1", 1, "mine")
            assert run.pool.group(group.id).trajectories[0].status == TrajectoryStatus.QUEUED
            run.mark_started()
            with pytest.raises(ForgeError, match="ctx"):
                async with open_run(config, "ctx"):
                    pass
        async with open_run(config, "ctx") as again:  # released at the block's end
            assert again.pool.group(group.id) is not None

    asyncio.run(main())


def test_the_gateway_serves_a_run_it_does_not_own(tmp_path, tiny_model):
    """One run, served by a gateway that is opened and closed inside it: the pool and the engine
    outlive the server, and what the server recorded is in the run's pool."""
    config = _config(tmp_path, tiny_model)

    async def main():
        async with open_run(config, "served") as run:
            listeners = open_listeners("127.0.0.1", 0, None, listen=False)
            async with serve_run(config, run, listeners, {"hermes": _hermes()}) as gw:
                assert gw.run is run and gw.pool is run.pool and gw.run_dir == run.dir
                info = await gw.open_session(SessionRequest(task_id="t9", scaffold="mine"))
            assert run.pool.trajectory_status(info.trajectory_id) is not None  # the run goes on without it

    asyncio.run(main())


def _hermes():
    from forge_cli.plugins import get_registry

    return get_registry().tool_format("hermes")


def test_a_failed_start_of_a_new_run_leaves_nothing(tmp_path, tiny_model):
    config = _config(tmp_path, tiny_model)

    async def main():
        async with open_run(config, "gone"):
            raise ForgeError("the consumer failed to start")

    with pytest.raises(ForgeError, match="failed to start"):
        asyncio.run(main())
    assert not (tmp_path / "runs" / "gone").exists()


def test_both_gateways_offer_what_a_driver_needs(tmp_path):
    """``DriverGateway`` is the declared protocol; the in-process and the remote gateway each have
    every member, the methods with the same parameters."""
    members = [n for n in DriverGateway.__dict__ if not n.startswith("_")] + list(DriverGateway.__annotations__)
    remote = RemoteGateway("http://127.0.0.1:1", "key", tmp_path, None, None, None, "m", None)
    for name in members:
        assert hasattr(Gateway, name) or name in Gateway.__dataclass_fields__, f"Gateway lacks {name}"
        assert hasattr(remote, name), f"RemoteGateway lacks {name}"
        member = DriverGateway.__dict__.get(name)
        if callable(member):
            expected = list(inspect.signature(member).parameters)
            for cls in (Gateway, RemoteGateway):
                assert list(inspect.signature(getattr(cls, name)).parameters) == expected, (cls, name)


def test_one_session_request_for_every_way_a_session_is_opened():
    """The admin endpoint's body, the in-process call and the remote client's body are one model."""
    from forge_cli.gateway.routes import admin

    assert admin.SessionRequest is SessionRequest
    for fn in (Gateway.open_session, RemoteGateway.open_session):
        assert inspect.signature(fn).parameters["request"].annotation in ("SessionRequest", SessionRequest)
    assert "request.model_dump(exclude_none=True)" in inspect.getsource(RemoteGateway.open_session)
    with pytest.raises(ValueError):
        SessionRequest(token_budget=0)
    with pytest.raises(ValueError):
        SessionRequest(training="yes")  # strict: a JSON body's "yes" is not true
    assert serve_gateway  # the composition over a run that `forge gateway serve` and the driver use

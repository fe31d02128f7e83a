"""The rollout driver: tasks through a real in-process gateway into the pool, verified, rewarded;
crashing and hanging scaffolds become failed and timed-out trajectories; a cancel leaves nothing running."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from forge_cli import plugins
from forge_cli.config import load_config
from forge_cli.rollout import driver
from forge_cli.rollout.records import RolloutRequest
from forge_cli.rollout.driver import rollout
from forge_cli.tasks.types import Outcome, Task, TaskSuite
from tests.waiting import until

LOOP = '''
import asyncio

HANGING = []  # the prompts of the episodes that reached their hang (what a test waits on)


async def run(episode):
    """One call; then, by what the task asks: answer, crash, or hang."""
    client = episode.client()
    async with client:
        reply = await client.chat.completions.create(model=episode.model, messages=[{"role": "user", "content": episode.prompt}],
                                                     max_tokens=8)
    text = reply.choices[0].message.content
    if "crash" in episode.prompt:
        raise RuntimeError("the agent fell over")
    if "hang" in episode.prompt:
        HANGING.append(episode.prompt)
        await asyncio.sleep(3600)
    episode.report("context.none", note="nothing removed")
    return text
'''
PLUGIN = '''
from forge_cli import hookimpl
from forge_cli.specs import ScaffoldSpec

@hookimpl
def register_scaffolds(register):
    register(ScaffoldSpec(name="one-call", kind="white", family="test", loop="driver_test_loop:run", description="one call"))
'''


def hanging() -> list[str]:
    """The prompts of the test loop's episodes that reached their hang (the loop's module, as the driver
    imported it)."""
    import importlib

    return importlib.import_module("driver_test_loop").HANGING


class Exact:
    def verify(self, task, workdir, transcript):
        ok = (transcript.answer or "").strip() == task.answer
        assert (workdir / "seed.txt").read_text() == task.id  # the task's files were laid out
        return Outcome(1.0 if ok else 0.0, "exact" if ok else f"got {transcript.answer!r}")


def _suite(prompts):
    def make(split, n, seed):
        return [Task(id=f"t{i}", suite="inline", prompt=p, answer="four", difficulty=str(i % 2), files={"seed.txt": f"t{i}"})
                for i, p in enumerate(prompts[:n])]

    return TaskSuite("inline", "inline tasks", make, Exact())


def scripted_config(fake_dist, tiny_model, tmp_path):
    """The one-call scaffold registered, and a config maker for it on the scripted engine (it answers
    "four" to "two plus two", else "five") recording under ``tmp_path / "runs"``."""
    fake_dist("driver-test", {"driver_test_plugin": PLUGIN, "driver_test_loop": LOOP}, {"dt": "driver_test_plugin"})
    plugins.reset()
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"rules": [{"when": "two plus two", "reply": "four"}], "turns": ["five"]}))

    def make(**more):
        return load_config(env={}, overrides={"model.path": str(tiny_model), "model.engine.type": "scripted",
                                              "model.engine.policy": str(policy), "gateway.port": 0, "gateway.socket": "",
                                              "run.dir": str(tmp_path / "runs"), **more})

    return make


@pytest.fixture
def setup(fake_dist, tiny_model, tmp_path, monkeypatch):
    make = scripted_config(fake_dist, tiny_model, tmp_path)

    def configure(prompts, **more):
        monkeypatch.setattr(driver, "resolve_suite", lambda name, verifier, registry: _suite(prompts))  # the seam: tasks
        return make(**more)

    return configure


def test_groups_run_verified_and_recorded(setup, tmp_path):
    config = setup(["what is two plus two?", "and two plus two again?", "what is two times three?"])
    seen = []
    request = RolloutRequest(scaffold="one-call", suite="inline", groups=3, n=2, concurrency=3)
    summary = asyncio.run(rollout(config, request, run="r", on_progress=lambda p: seen.append((p.running, p.finished))))
    from forge_cli.pool.store import DataPool

    pool = DataPool.sqlite(tmp_path / "runs" / "r" / "pool.sqlite")
    groups = pool.groups()
    assert [g.task_id for g in sorted(groups, key=lambda g: g.queue_index)] == ["t0", "t1", "t2"]  # the queue is in task order
    trajectories = [t for g in groups for t in g.trajectories]
    assert len(trajectories) == 6 and all(t.status == "completed" for t in trajectories)
    full = [pool.trajectory(t.id) for t in trajectories]
    assert all(len(t.completions) == 1 and t.scaffold == "one-call" for t in full)
    assert all(c.sampling.training and c.sampling.top_p == 1.0 for t in full for c in t.completions)  # trainable
    assert sorted(t.rewards["outcome"] for t in full) == [0, 0, 1, 1, 1, 1]
    # the group's rewards: every completion credited, advantages normalised within each group
    assert all(c.advantage is not None and c.reward_to_go is not None for t in full for c in t.completions)
    for g in groups:
        members = [pool.trajectory(t.id) for t in g.trajectories]
        assert sum(c.advantage for t in members for c in t.completions) == pytest.approx(0.0, abs=1e-9)
    assert summary.mean_components["outcome"] == pytest.approx(4 / 6)
    assert all(any(e.kind == "context.none" for e in t.events) for t in full)
    assert max(r for r, _ in seen) <= 3 and seen[-1] == (0, 6)  # never over the concurrency
    assert summary.trajectories == 6 and summary.success_rate == pytest.approx(4 / 6)
    assert summary.completions_per_trajectory == 1 and summary.context_events_per_trajectory == 1
    assert summary.by_difficulty == {"0": 0.5, "1": 1.0}
    assert summary.prefix_share > 1.0  # the two samples of a task share their prompt
    pool.close()


def test_crashing_and_hanging_scaffolds_end_their_trajectories_and_the_rollout_goes_on(setup, tmp_path):
    config = setup(["two plus two, then crash", "two plus two, then hang", "two plus two"])
    request = RolloutRequest(scaffold="one-call", suite="inline", groups=3, n=1, trajectory_timeout_s=2.0)
    summary = asyncio.run(rollout(config, request, run="r"))
    from forge_cli.pool.store import DataPool

    pool = DataPool.sqlite(tmp_path / "runs" / "r" / "pool.sqlite")
    by_task = {g.task_id: pool.trajectory(g.trajectories[0].id) for g in pool.groups()}
    assert by_task["t0"].status == "failed" and "the agent fell over" in by_task["t0"].error
    assert by_task["t1"].status == "timed_out"
    assert by_task["t2"].status == "completed" and by_task["t2"].rewards["outcome"] == 1.0
    assert all(len(t.completions) == 1 for t in by_task.values())  # partial work is kept
    assert summary.by_status == {"failed": 1, "timed_out": 1, "completed": 1}
    pool.close()


def test_a_cancelled_rollout_leaves_nothing_running(setup, tmp_path):
    config = setup(["two plus two, then hang"] * 3)
    request = RolloutRequest(scaffold="one-call", suite="inline", groups=3, n=2, concurrency=2)

    async def main():
        task = asyncio.create_task(rollout(config, request, run="r"))
        # cancelled once its two running trajectories have made their call and hang (concurrency 2)
        await until(lambda: len(hanging()) == 2, what="two trajectories hanging after their call")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    from forge_cli.pool.store import DataPool

    pool = DataPool.sqlite(tmp_path / "runs" / "r" / "pool.sqlite")
    trajectories = [pool.trajectory(t.id) for g in pool.groups() for t in g.trajectories]
    assert trajectories and all(t.status == "failed" and t.error == "interrupted" for t in trajectories)
    pool.close()


def test_unknown_scaffold_and_bad_counts_are_clear_errors(setup):
    from forge_cli.errors import ForgeError

    config = setup(["x"])
    with pytest.raises(ForgeError, match="no scaffold named 'nope'"):
        asyncio.run(rollout(config, RolloutRequest(scaffold="nope", suite="inline")))
    with pytest.raises(ForgeError, match="at least 1"):
        asyncio.run(rollout(config, RolloutRequest(scaffold="one-call", suite="inline", groups=0)))


BLACK = '''
from forge_cli import hookimpl
from forge_cli.specs import InstallRecipe, LaunchSpec, ScaffoldSpec

@hookimpl
def register_scaffolds(register):
    register(ScaffoldSpec(name="sleeper", kind="black", description="a program that never ends",
                          install=InstallRecipe("pip", "sleeper", ">=1", "python"),
                          launch=LaunchSpec(("$bin", "-c", "import time; time.sleep(600)"))))
'''


def test_a_hanging_black_box_agent_is_timed_out_not_failed(fake_dist, setup, tmp_path):
    from tests.test_blackbox import fake_install

    fake_dist("sleeper-plugin", {"sleeper_plugin": BLACK}, {"sl": "sleeper_plugin"})
    config = setup(["two plus two"])
    plugins.reset()
    fake_install(plugins.get_registry().scaffold("sleeper"))
    summary = asyncio.run(rollout(config, RolloutRequest(scaffold="sleeper", suite="inline", groups=1, n=2,
                                                         trajectory_timeout_s=1.5), run="r"))
    assert summary.by_status == {"timed_out": 2}
    from forge_cli.pool.store import DataPool

    pool = DataPool.sqlite(tmp_path / "runs" / "r" / "pool.sqlite")
    assert all(pool.trajectory(t.id).status == "timed_out" for g in pool.groups() for t in g.trajectories)
    pool.close()


BREAKER = '''
from forge_cli import hookimpl
from forge_cli.specs import InstallRecipe, LaunchSpec, ScaffoldSpec

SCRIPT = """
import os, sys
task = sys.argv[1]
if "hog" in task:
    blocks = [bytearray(64 * 2**20) for _ in range(64)]  # 4 GiB, touched
elif "bomb" in task:
    while True:
        os.fork()
elif "disk" in task:
    with open("filler", "wb") as out:
        while True:
            out.write(os.urandom(2**20))
            out.flush()
print("four")
"""

@hookimpl
def register_scaffolds(register):
    from forge_cli.builtin.scaffolds import AgentOptions

    register(ScaffoldSpec(name="breaker", kind="black", description="breaks its sandbox's limits when told",
                          install=InstallRecipe("pip", "breaker", ">=1", "python"),
                          launch=LaunchSpec(("$bin", "-c", SCRIPT, "$prompt")), options=AgentOptions))
'''


@pytest.mark.usefixtures("local_sandbox")
def test_agents_that_break_their_sandboxs_limits_fail_with_the_reason_and_the_rollout_goes_on(fake_dist, setup, tmp_path):
    """In bubblewrap, a memory hog, a fork bomb and a disk filler each end their own trajectory as failed with the
    limit named in its recorded error; the well-behaved agent beside them completes, solved; nothing is left."""
    import os
    from pathlib import Path

    from forge_cli.pool.store import DataPool
    from forge_cli.sandbox.local import MARKER_VAR
    from tests.test_blackbox import fake_install

    fake_dist("breaker-plugin", {"breaker_plugin": BREAKER}, {"br": "breaker_plugin"})
    config = setup(["two plus two, hog", "two plus two, bomb", "two plus two, disk", "two plus two"],
                   **{"rollout.sandbox": "local", "sandboxes.local.isolation": "bwrap", "sandboxes.local.memory_mb": 256,
                      "sandboxes.local.processes": 64, "sandboxes.local.disk_mb": 32, "gateway.socket": "auto"})
    plugins.reset()
    fake_install(plugins.get_registry().scaffold("breaker"))
    summary = asyncio.run(rollout(config, RolloutRequest(scaffold="breaker", suite="inline", groups=4, n=1, concurrency=4,
                                                         trajectory_timeout_s=60), run="r"))
    assert summary.by_status == {"completed": 1, "failed": 3} and summary.trajectories == 4
    pool = DataPool.sqlite(tmp_path / "runs" / "r" / "pool.sqlite")
    ended = {}
    for group in pool.groups():
        (t,) = [pool.trajectory(x.id) for x in group.trajectories]
        ended[t.task_id] = (t.status, t.error or "", t.rewards.get("outcome"))
    pool.close()
    assert ended["t3"][0] == "completed" and ended["t3"][2] == 1.0
    assert ended["t0"][0] == "failed" and "memory limit of 256 MiB" in ended["t0"][1], ended["t0"]
    assert ended["t1"][0] == "failed" and "limit of 64 processes" in ended["t1"][1], ended["t1"]
    # the disk bound is a file-size rlimit and a poll of the folders' size: whichever stops the filler first
    assert ended["t2"][0] == "failed" and re.search(r"(disk limit|more than its limit) of 32 MiB", ended["t2"][1]), ended["t2"]
    # this rollout's sandboxed processes (marked, and working under this test's folder: another test's are its own)
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _marked(Path("/proc") / pid / "environ", MARKER_VAR)
            and _marked(Path("/proc") / pid / "environ", f"PWD={tmp_path}")]
    assert left == []


def test_an_agents_own_sandbox_wins_over_the_runs(fake_dist, setup, tmp_path):
    """[scaffolds.NAME] sandbox: the agent runs there whatever rollout.sandbox says, and a bad one is refused first."""
    from forge_cli.errors import ForgeError
    from tests.test_blackbox import fake_install

    fake_dist("breaker-plugin", {"breaker_plugin": BREAKER}, {"br": "breaker_plugin"})
    plugins.reset()
    fake_install(plugins.get_registry().scaffold("breaker"))
    request = RolloutRequest(scaffold="breaker", suite="inline", groups=1, n=1, trajectory_timeout_s=60)
    config = setup(["two plus two"], **{"rollout.sandbox": "no-such-sandbox", "scaffolds.breaker.sandbox": "local",
                                        "sandboxes.local.isolation": "none"})
    assert driver.sandbox_of(config, "breaker") == "local" and driver.sandbox_of(config, "one-call") == "no-such-sandbox"
    assert asyncio.run(rollout(config, request, run="own")).by_status == {"completed": 1}
    config = setup(["two plus two"], **{"rollout.sandbox": "local", "scaffolds.breaker.sandbox": "no-such-sandbox"})
    with pytest.raises(ForgeError, match="unknown sandbox 'no-such-sandbox'"):
        asyncio.run(rollout(config, request, run="bad"))
    assert not (tmp_path / "runs" / "bad").exists()  # refused before anything was recorded


def _marked(environ, var: str) -> bool:
    """Whether a process's environment holds ``var=`` (``var`` may carry the start of its value)."""
    try:
        return (var if "=" in var else f"{var}=").encode() in environ.read_bytes()
    except OSError:
        return False


def test_what_would_fail_every_trajectory_fails_the_rollout_first(setup, tmp_path):
    from forge_cli.errors import ForgeError

    config = setup(["two plus two"], **{"rewards.weights.nope": 1.0})
    with pytest.raises(ForgeError, match="names 'nope', which no plugin registered"):
        asyncio.run(rollout(config, RolloutRequest(scaffold="one-call", suite="inline", groups=1, n=1), run="r"))
    assert not (tmp_path / "runs" / "r").exists()  # nothing was started, nothing recorded


def test_sessions_are_forgotten_and_groups_released(setup, tmp_path):
    """After a rollout the gateway keeps no session of it; after a cancel no group waits for rewards for ever."""
    from forge_cli.gateway.server import serve_gateway

    config = setup(["two plus two", "two plus two, then hang"])

    async def main():
        async with serve_gateway(config, "r") as gw:
            await rollout(config, RolloutRequest(scaffold="one-call", suite="inline", groups=1, n=2), gateway=gw)
            assert gw.state.sessions == {}
            task = asyncio.create_task(rollout(config, RolloutRequest(scaffold="one-call", suite="inline", groups=2, n=2,
                                                                      seed=1), gateway=gw))
            # the hanging task's two trajectories have made their call (the other group is done or going)
            await until(lambda: len(hanging()) == 2, what="the hanging group's trajectories after their call")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            cur = gw.pool._conn.execute("SELECT COUNT(*) FROM groups WHERE rewards_pending")
            return cur.fetchone()[0]

    assert asyncio.run(main()) == 0


def test_a_trajectory_cannot_sample_past_its_token_budget(setup, tmp_path):
    """Every call's max_tokens is cut to what the budget has left; past it the call gets a 409 and the
    trajectory ends failed, saying why."""
    config = setup(["two plus two"])
    seen = []
    request = RolloutRequest(scaffold="one-call", suite="inline", groups=1, n=1, max_tokens_per_trajectory=1)
    summary = asyncio.run(rollout(config, request, run="r", on_progress=lambda p: seen.append(p.output_tokens)))
    from forge_cli.pool.store import DataPool

    pool = DataPool.sqlite(tmp_path / "runs" / "r" / "pool.sqlite")
    (trajectory,) = [pool.trajectory(t.id) for g in pool.groups() for t in g.trajectories]
    (completion,) = trajectory.completions
    assert completion.sampling.max_tokens == 1 and len(completion.output_ids) == 1  # cut to the budget
    assert summary.output_tokens == 1 and seen[-1] == 1
    pool.close()


def test_a_rollout_through_a_running_gateway(setup, tmp_path):
    """--gateway URL: sessions opened over HTTP with the admin key, the server's run pool written by the driver."""
    from forge_cli.errors import ForgeError
    from forge_cli.gateway.server import serve_gateway

    config = setup(["what is two plus two?", "two plus two?"])

    async def main():
        async with serve_gateway(config, "served") as gw:
            with pytest.raises(ForgeError, match="refused the admin key"):
                await rollout(config, RolloutRequest(scaffold="one-call", suite="inline", gateway_url=gw.url, admin_key="no"),
                              run="served")
            request = RolloutRequest(scaffold="one-call", suite="inline", groups=2, n=2, gateway_url=gw.url,
                                     admin_key=gw.admin_key)
            summary = await rollout(config, request, run="served")
            assert gw.state.sessions == {}  # forgotten over HTTP once ended
            trajectories = [gw.pool.trajectory(t.id) for g in gw.pool.groups() for t in g.trajectories]
            return summary, trajectories

    summary, trajectories = asyncio.run(main())
    assert summary.success_rate == 1.0 and len(trajectories) == 4
    assert all(t.status == "completed" and t.rewards["outcome"] == 1.0 and len(t.completions) == 1 for t in trajectories)
    assert all(c.sampling.training and c.advantage is not None for t in trajectories for c in t.completions)

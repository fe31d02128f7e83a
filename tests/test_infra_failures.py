"""Infrastructure failures are not the policy's: a trajectory that failed for a reason its policy
could not cause (the sandbox did not start, the scaffold fell over before its first model call, the
verifier raised) is recorded with that cause, run again afresh while it has recorded nothing, and
otherwise its group is dropped whole — never trained as a reward of 0. Peers' users report training
on flaky-sandbox zeros as a silent data-quality bug (miles#2801/#2802)."""

from __future__ import annotations

import asyncio
import json

from forge_cli import plugins
from forge_cli.pool.store import DataPool
from forge_cli.pool.types import GroupStatus
from forge_cli.rollout import driver
from forge_cli.rollout.driver import rollout
from forge_cli.rollout.records import RolloutRequest
from forge_cli.tasks.types import Outcome, Task, TaskSuite
from tests.test_rollout_driver import scripted_config

LOOP = '''
ATTEMPTS = {}  # prompt -> runs so far


async def run(episode):
    """Falls over before its first model call on every other run when the task says "flaky" (one at a
    time: each trajectory's first run), on every run when it says "broken"; otherwise one call, answered."""
    ATTEMPTS[episode.prompt] = ATTEMPTS.get(episode.prompt, 0) + 1
    if "broken" in episode.prompt or ("flaky" in episode.prompt and ATTEMPTS[episode.prompt] % 2 == 1):
        raise ConnectionError("the tool server did not come up")
    client = episode.client()
    async with client:
        reply = await client.chat.completions.create(model=episode.model, messages=[{"role": "user", "content": episode.prompt}],
                                                     max_tokens=8)
    return reply.choices[0].message.content
'''
PLUGIN = '''
from forge_cli import hookimpl
from forge_cli.specs import SandboxSpec, ScaffoldSpec


def _open(workdir, options, gateway):
    raise OSError(28, "No space left on device")  # the machine, not the policy


@hookimpl
def register_scaffolds(register):
    register(ScaffoldSpec(name="flaky-loop", kind="white", family="test", loop="infra_test_loop:run", description="flaky"))


@hookimpl
def register_sandboxes(register):
    register(SandboxSpec(name="full-disk", description="a sandbox that cannot start", check=lambda: None, open=_open))
'''


class Exact:
    def verify(self, task, workdir, transcript):
        if "judge-crash" in task.prompt:
            raise KeyError("expected")  # a verifier bug, whatever the policy did
        ok = (transcript.answer or "").strip() == task.answer
        return Outcome(1.0 if ok else 0.0, "exact" if ok else f"got {transcript.answer!r}")


def suite(prompts):
    def make(split, n, seed):
        return [Task(id=f"t{i}", suite="inline", prompt=p, answer="four") for i, p in enumerate(prompts[:n])]

    return TaskSuite("inline", "inline tasks", make, Exact())


def run_rollout(fake_dist, tiny_model, tmp_path, monkeypatch, prompts, *, scaffold="flaky-loop", more=None, **request):
    make = scripted_config(fake_dist, tiny_model, tmp_path)  # the scripted engine answers "four" to "two plus two"
    fake_dist("infra-test", {"infra_test_plugin": PLUGIN, "infra_test_loop": LOOP}, {"it": "infra_test_plugin"})
    plugins.reset()
    if prompts is not None:
        monkeypatch.setattr(driver, "resolve_suite", lambda name, verifier, registry: suite(prompts))  # the seam: tasks
    config = make(**(more or {}))
    progress = []
    summary = asyncio.run(rollout(config, RolloutRequest(scaffold=scaffold, suite=request.pop("suite", "inline"), **request),
                                  run="r", on_progress=progress.append))
    return summary, progress[-1], DataPool.sqlite(tmp_path / "runs" / "r" / "pool.sqlite")


def test_a_trajectory_that_falls_over_before_its_first_call_runs_again_and_is_trained_as_usual(
        fake_dist, tiny_model, tmp_path, monkeypatch, cli):
    _, progress, pool = run_rollout(fake_dist, tiny_model, tmp_path, monkeypatch, ["flaky: two plus two?"],
                                    groups=1, n=3, concurrency=1)
    (group,) = pool.groups()
    assert group.status is GroupStatus.ACTIVE and not group.rewards_pending  # rewarded: the trainer may take it
    for t in group.trajectories:
        assert t.status.value == "completed" and t.infra is None and t.reward is not None
        retry = [e for e in t.events if e.kind == "infra-retry"]
        assert len(retry) == 1 and retry[0].data["cause"] == "launch" and "ConnectionError" in retry[0].data["reason"]
        assert [e.data["reason"] for e in t.events if e.kind == "verified"] == ["exact"]  # why it scored, kept
        assert len(t.completions) == 1 and all(c.advantage is not None for c in t.completions)
    assert progress.retried == 3 and progress.infra == 0 and progress.completed == 3
    # what a user reads of one: its events (the retry, the verifier's reason) and its text
    shown = cli("pool", "show", group.trajectories[0].id, "--run", str(tmp_path / "runs" / "r"), "--text")
    assert shown.exit_code == 0, shown.stderr
    assert "infra-retry" in shown.stdout and "verified" in shown.stdout and "exact" in shown.stdout
    assert "flaky: two plus two?" in shown.stdout and "seq 0 output" in shown.stdout and "four" in shown.stdout


def test_one_that_never_starts_drops_its_group_whole_and_nothing_of_it_is_trained(fake_dist, tiny_model, tmp_path, monkeypatch):
    summary, progress, pool = run_rollout(fake_dist, tiny_model, tmp_path, monkeypatch,
                                          ["broken: two plus two?", "two plus two?"], groups=2, n=2, concurrency=4,
                                          infra_retries=1)
    broken, fine = sorted(pool.groups(), key=lambda g: g.task_id)
    assert broken.status is GroupStatus.DROPPED and fine.status is GroupStatus.ACTIVE
    for t in broken.trajectories:
        assert t.status.value == "failed" and t.infra == "launch" and t.completions == [] and t.reward is None
        assert "before its first model call" in t.error and "the tool server did not come up" in t.error
        assert len([e for e in t.events if e.kind == "infra-retry"]) == 1  # retried once (infra_retries = 1), then given up
    assert pool.stats()["infra_failures"] == {"launch": 2}
    assert progress.infra == 2 and progress.dropped_groups == 1 and progress.failed == 2
    # the summary's success rate is the policy's: 2 of the 2 it ran, the 2 it never got to act in left out
    assert summary.success_rate == 1.0 and summary.infra_failures == {"launch": 2}
    assert ("infrastructure failures", "2  (launch 2; groups dropped, not trained)") in summary.rows()
    batch = pool.take_batch(2, 1, window=None)  # what a trainer gets: the healthy group alone
    assert [g.task_id for g in batch.groups] == [fine.task_id]


def test_a_sandbox_that_does_not_start_is_an_infrastructure_failure(fake_dist, tiny_model, tmp_path, monkeypatch):
    """The built-in tool-call scaffold with its tools from an MCP server in a sandbox that cannot start."""
    _, progress, pool = run_rollout(fake_dist, tiny_model, tmp_path, monkeypatch, None, scaffold="tool-call",
                                    suite="files", groups=1, n=2, concurrency=2, infra_retries=0,
                                    more={"rollout.sandbox": "full-disk", "scaffolds": {"tool-call": {"mcp": ["files"]}}})
    (group,) = pool.groups()
    assert group.status is GroupStatus.DROPPED
    assert {t.infra for t in group.trajectories} == {"sandbox"}
    assert all("the full-disk sandbox did not start" in t.error and "No space left" in t.error for t in group.trajectories)
    assert pool.stats()["infra_failures"] == {"sandbox": 2} and progress.dropped_groups == 1


def test_a_verifier_that_raises_is_not_the_policys_failure(fake_dist, tiny_model, tmp_path, monkeypatch):
    _, progress, pool = run_rollout(fake_dist, tiny_model, tmp_path, monkeypatch, ["judge-crash: two plus two?"],
                                    groups=1, n=2, concurrency=2)
    (group,) = pool.groups()
    assert group.status is GroupStatus.DROPPED
    for t in group.trajectories:  # the policy acted (a completion each): not retried under its id, the group goes
        assert t.infra == "verifier" and len(t.completions) == 1 and "KeyError" in t.error
        assert not [e for e in t.events if e.kind == "infra-retry"]
        assert all(c.reward is None for c in t.completions)  # no reward of 0 written for anything
    assert progress.infra == 2 and json.loads(json.dumps(pool.stats()))["infra_failures"] == {"verifier": 2}

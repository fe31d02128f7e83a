"""The Forge loop end to end on CPU: rollouts produce while the trainer trains; each step takes P
groups, trains on their recorded samples, swaps the weights into the engine and publishes the
version; held-out evaluations stay out of training; a run killed with SIGKILL at a random moment
resumes from its last checkpoint with nothing lost or trained twice."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forge_cli.config import load_config
from forge_cli.records.metrics import StepMetrics, parse_line
from tests.waiting import wait_until

SCRIPTED = {"model.engine.type": "scripted", "model.engine.policy": "forge_cli.tasks.demo_policies:calc",
            "gateway.port": 0, "gateway.socket": "", "pool.max_active_groups": 2, "train.groups_per_step": 1,
            "train.group_size": 2, "train.engine": "torch", "train.lr": 1e-3, "rollout.scaffold": "tool-call",
            "rollout.task": "calc", "rollout.concurrency": 4, "train.eval_tasks": 2, "train.eval_samples": 2}


def timeline(run: Path) -> dict[int, StepMetrics]:
    """Each step's line as the run's history stands: a step redone after a resume replaces the old line."""
    steps: dict[int, StepMetrics] = {}
    for raw in (run / "metrics.jsonl").read_text().splitlines():
        line = parse_line(json.loads(raw))
        if isinstance(line, StepMetrics):
            steps = {k: v for k, v in steps.items() if k < line.step}
            steps[line.step] = line
    return steps


@pytest.mark.slow
def test_the_loop_trains_swaps_publishes_and_evaluates(tiny_model, tmp_path):
    from forge_cli.pool.store import DataPool
    from forge_cli.train.loop import train_loop

    config = load_config(env={}, overrides={**SCRIPTED, "model.path": str(tiny_model), "run.dir": str(tmp_path / "runs"),
                                            "train.eval_every": 2, "train.checkpoint_every": 3})
    seen = []
    result = asyncio.run(train_loop(config, run="loop", steps=3, on_event=lambda kind, fields: seen.append((kind, fields))))
    assert (result.steps, result.status, result.policy_version) == (3, "finished", 3)
    steps = [f for kind, f in seen if kind == "step"]
    assert [s.step for s in steps] == [1, 2, 3]
    assert [s.policy_version for s in steps] == [1, 2, 3]  # each step's weights went into the engine
    assert all(s.groups == 1 and s.samples == 4 for s in steps)  # 2 trajectories × (a tool call, an answer)
    assert all(s.success == 1.0 and s.success_by_suite == {"calc": 1.0} for s in steps)
    assert all(s.tokens > s.unique_tokens > 0 for s in steps)  # the prefix tree merged the shared prompt
    assert all(sum(s.ages.values()) == s.samples and s.max_age >= 0 for s in steps)
    assert all(0.0 <= s.trainer_idle <= 1.0 and 0.0 <= s.engine_idle <= 1.0 for s in steps)
    assert all(s.trainer_idle == pytest.approx(s.wait_s / s.step_s) for s in steps)
    evals = [f for kind, f in seen if kind == "eval"]
    # the starting policy (step 0: "before"), every eval_every steps, and the final policy once more
    assert [e.step for e in evals] == [0, 2, 3] and all(e.success == 1.0 and e.tasks == 2 for e in evals)
    assert all(e.solved_tool_calls == 1.0 and e.solved_seconds > 0 for e in evals)  # a call, then the answer
    assert (result.first_heldout_success, result.last_heldout_success) == (1.0, 1.0)
    assert all(e.reward_mean >= 1.0 for e in evals)  # rewarded like any group (outcome 1 + a time bonus)
    run = tmp_path / "runs" / "loop"
    lines = [parse_line(json.loads(line)) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(line.kind, line.step) for line in lines] == [("eval", 0), ("step", 1), ("step", 2), ("eval", 2), ("step", 3),
                                                          ("eval", 3)]
    assert all(a.time_s <= b.time_s for a, b in zip(lines, lines[1:]))
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    log = (run / "log.txt").read_text()
    assert log.count(" step {") == 3 and log.count(" eval {") == 3 and "status {'status': 'finished'" in log
    assert (run / "checkpoints" / "latest").read_text().strip() == "step-00000003"
    assert (run / "checkpoints" / "step-00000003" / "model" / "tokenizer.json").is_file()  # servable as it is
    assert (run / "checkpoints" / "step-00000003" / "model" / "forge_model.json").is_file()  # a copy of the embedded default
    state = json.loads((run / "train_state.json").read_text())
    assert state["status"] == "finished" and state["first_heldout_success"] == 1.0
    assert state["starting_policy"] == "the embedded default"  # tiny_model is one, made afresh (no warm start)
    pool = DataPool.sqlite(run / "pool.sqlite")
    consumed = {g.id for g in pool.groups() if g.status.value == "consumed"}
    assert consumed == {gid for s in steps for gid in s.group_ids}
    evaluation = [g for g in pool.groups() if g.status.value == "evaluation"]
    assert len(evaluation) == 6 and all(g.queue_index < 0 for g in evaluation)  # recorded, out of the queue
    assert len([g for g in pool.groups() if g.status.value != "evaluation"]) <= 3 + 2  # admission held
    pool.close()


def test_bad_budgets_are_refused_before_anything_starts(tmp_path):
    from forge_cli.errors import ForgeError
    from forge_cli.train.loop import train_loop

    config = load_config(env={}, overrides={"run.dir": str(tmp_path)})
    with pytest.raises(ForgeError, match="steps must be at least 1"):
        asyncio.run(train_loop(config, steps=0))
    with pytest.raises(ForgeError, match="minutes must be > 0"):
        asyncio.run(train_loop(config, minutes=0))
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_the_final_evaluation_fits_in_the_time_budget(tiny_model, tmp_path, monkeypatch):
    """--minutes bounds the whole run: after an evaluation the steps stop one evaluation's time before
    the deadline, so the final policy's evaluation ends within it (it used to start at the deadline).
    The loop's clock is a stand-in that only the test moves: a step takes 1 s of it, an evaluation 5 s,
    whatever this machine's speed."""
    from types import SimpleNamespace

    from forge_cli.train import loop
    from forge_cli.train.loop import train_loop

    now = [time.monotonic()]
    step_s, eval_s = 1.0, 5.0
    monkeypatch.setattr(loop, "time", SimpleNamespace(monotonic=lambda: now[0], time=time.time))
    real_evaluate = loop.evaluate_heldout

    async def evaluate(*args, **kwargs):
        result = await real_evaluate(*args, **kwargs)
        now[0] += eval_s
        return result

    monkeypatch.setattr(loop, "evaluate_heldout", evaluate)

    def on_event(kind, fields):
        if kind == "step":
            now[0] += step_s
        seen.append((kind, now[0], fields))

    config = load_config(env={}, overrides={**SCRIPTED, "model.path": str(tiny_model), "run.dir": str(tmp_path / "runs"),
                                            "train.eval_every": 2, "train.eval_tasks": 16, "train.eval_samples": 2,
                                            "train.checkpoint_every": 0})
    seen: list[tuple[str, float, object]] = []
    start, minutes = now[0], 0.5
    result = asyncio.run(train_loop(config, run="budget", minutes=minutes, on_event=on_event))
    assert result.status == "finished"
    evals = [(t, f) for kind, t, f in seen if kind == "eval"]
    steps = [f.step for kind, _, f in seen if kind == "step"]
    assert len(evals) >= 3 and evals[-1][1].step == steps[-1]  # periodic ones, the final policy's last
    ends = {f.step: t for kind, t, f in seen if kind == "step"}
    durations = [t - ends[f.step] for t, f in evals if f.step]  # after a step (not the starting policy's, at 0)
    assert min(durations) > 0.5  # an evaluation takes long enough here for the bound to be tested
    assert evals[-1][0] - start <= minutes * 60 + 0.5 * min(durations)


def forge_train(tmp_path: Path, tiny_model: Path, *args: str, engine: str = "torch") -> subprocess.Popen:
    sets = {**SCRIPTED, "model.path": str(tiny_model), "run.dir": str(tmp_path / "runs"), "train.checkpoint_every": 2,
            "train.eval_every": 0, "train.warmstart.when": "never", "train.engine": engine}
    cmd = [sys.executable, "-m", "forge_cli"] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    env = {**os.environ, "FORGE_HOME": str(tmp_path / "home")}
    # the default SIGINT, whatever this process inherited (a shell's background job has it ignored)
    return subprocess.Popen(cmd + ["train", "--no-live", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


STEPS = 12


def check_resumed(run: Path, before: dict[int, StepMetrics], kept: int) -> None:
    """The run's history after a resume: every step once, the checkpointed part as it was, no group
    trained twice, the pool's consumed groups exactly the trained ones, nothing recorded lost."""
    from forge_cli.pool.store import DataPool

    after = timeline(run)
    assert sorted(after) == list(range(1, STEPS + 1))
    assert all(after[s].group_ids == before[s].group_ids for s in range(1, kept + 1))
    trained = [gid for s in after.values() for gid in s.group_ids]
    assert len(trained) == len(set(trained))  # nothing trained twice
    pool = DataPool.sqlite(run / "pool.sqlite")
    groups = pool.groups()
    consumed = {g.id for g in groups if g.status.value == "consumed"}
    assert consumed == set(trained)  # every group the pool says was trained is in the run's history, and only those
    # nothing recorded was lost: every group is trained, still queued, or dropped because it was cut off
    assert all(g.status.value in ("consumed", "active", "dropped") for g in groups)
    assert not [t for g in groups for t in g.trajectories if t.status.value in ("running", "queued")]
    assert all(t.error == "interrupted" for g in groups if g.status.value == "dropped" for t in g.trajectories
               if t.status.value == "failed")
    versions = [line.policy_version for _, line in sorted(after.items())]
    assert versions == sorted(set(versions))  # no version names two policies
    state = json.loads((run / "train_state.json").read_text())
    assert (state["status"], state["step"]) == ("finished", STEPS)
    pool.close()


def wait_for_steps(run: Path, proc: subprocess.Popen, n: int) -> None:
    """Until the run's metrics hold ``n`` steps (or its process has ended: the caller says so)."""
    metrics = run / "metrics.jsonl"
    wait_until(lambda: proc.poll() is not None or (metrics.is_file() and metrics.read_text().count('"kind": "step"') >= n),
               what=f"{n} steps in {metrics}", timeout=240)


def latest_step(run: Path) -> int:
    pointer = run / "checkpoints" / "latest"
    return int(pointer.read_text().strip().split("-")[1]) if pointer.exists() else 0


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "engine"), [(0, "torch"), (1, "deepspeed")])
def test_sigkill_at_a_random_moment_then_resume_loses_and_repeats_nothing(tiny_model, tmp_path, seed, engine):
    rng = random.Random(seed)
    run = tmp_path / "runs" / "killed"
    proc = forge_train(tmp_path, tiny_model, "--run", "killed", "--steps", str(STEPS), engine=engine)
    # kill it somewhere after its first step, at a step drawn at random: the moment its line is written,
    # so mid-checkpoint after an even step (checkpoint_every 2), mid-rollout always, and before the end
    wait_for_steps(run, proc, rng.randint(1 + seed, STEPS - 2))
    assert proc.poll() is None, proc.stdout.read()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before, kept = timeline(run), latest_step(run)
    resumed = forge_train(tmp_path, tiny_model, "--resume", "killed", "--steps", str(STEPS), engine=engine)
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out
    assert f"Finished after {STEPS} steps" in out
    check_resumed(run, before, kept)


@pytest.mark.slow
def test_ctrl_c_checkpoints_the_last_step_and_resume_goes_on(tiny_model, tmp_path):
    run = tmp_path / "runs" / "stopped"
    proc = forge_train(tmp_path, tiny_model, "--run", "stopped", "--steps", str(STEPS))
    wait_for_steps(run, proc, random.Random(5).randint(3, STEPS - 2))  # a step drawn at random, before the end
    assert proc.poll() is None, proc.stdout.read()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    state = json.loads((run / "train_state.json").read_text())
    before = timeline(run)
    assert state["status"] == "stopped" and latest_step(run) == state["step"] >= max(before)  # the last step is kept
    resumed = forge_train(tmp_path, tiny_model, "--resume", "stopped", "--steps", str(STEPS))
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out
    check_resumed(run, before, latest_step(run) and state["step"])


@pytest.mark.parametrize("updates", [1, 3])
def test_a_step_makes_updates_per_step_updates_on_its_batch_then_one_swap(updates):
    """``train.updates_per_step``: K optimizer updates on the same samples, against the same sampler logprobs
    (the samples are not re-scored), then the weights go into the engine once and one version is published.
    The trainer, engine and pool are recorders here: what is tested is the step's order of calls."""
    from types import SimpleNamespace

    from forge_cli.train.loop import _advance

    calls: list[tuple] = []
    samples = SimpleNamespace(samples=["s1", "s2"], temperature=0.7)

    class Trainer:
        def step(self, batch, loss, **kwargs):
            calls.append(("step", tuple(batch), loss.type, kwargs["temperature"]))
            return SimpleNamespace(loss=float(len(calls)))

        def state_dict(self):
            calls.append(("state_dict",))
            return {"w": len(calls)}

    class Engine:
        async def load_weights(self, weights):
            calls.append(("load_weights", weights["w"]))
            return 7

    gw = SimpleNamespace(engine=Engine(), pool=SimpleNamespace(publish_version=lambda v: calls.append(("publish", v))))
    config = load_config(env={}, overrides={"train.updates_per_step": updates})
    stats, _, version = asyncio.run(_advance(config, Trainer(), gw, samples))
    assert calls == [("step", ("s1", "s2"), "cispo", 0.7)] * updates + [("state_dict",), ("load_weights", updates + 1),
                                                                         ("publish", 7)]
    assert (stats.loss, version) == (float(updates), 7)  # the last update's stats


def test_a_resumed_run_keeps_when_it_was_first_started(tmp_path):
    """``train_state.json``'s ``started_at`` is the run's first start: a resumed run (another
    ``recorded`` block on the same folder) keeps it, so ``forge runs`` does not move the run up."""
    from types import SimpleNamespace

    from forge_cli.records.metrics import read_state
    from forge_cli.train.loop import LoopState, recorded

    t = SimpleNamespace(run=SimpleNamespace(dir=tmp_path), tell=lambda kind, fields: None)

    async def one_session(step: int) -> None:
        async with recorded(t, LoopState(step, step, None), minutes=None):
            pass

    asyncio.run(one_session(0))
    first = read_state(tmp_path)["started_at"]
    asyncio.run(one_session(5))
    state = read_state(tmp_path)
    assert state["started_at"] == first and state["status"] == "finished" and state["step"] == 5

"""``forge train``'s live view shows what the issue asks of it, from the loop's own records."""

from __future__ import annotations

import io

from rich.console import Console

from forge_cli.records.metrics import EvalMetrics, StepMetrics, WarmstartMetrics, Window
from forge_cli.train.display import TrainDisplay


def _render(display: TrainDisplay) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(display)
    return out.getvalue()


def test_a_step_an_evaluation_and_a_warm_start_are_shown():
    display = TrainDisplay(steps=10, minutes=15)
    display.update("warmstart", WarmstartMetrics(step=40, loss=0.41, heldout_success=0.125))
    display.update("step", StepMetrics(step=3, policy_version=7, reward_mean=0.5, rewards={"outcome": 0.5, "process": -0.01},
                                       success=0.375, samples_per_s=8.5, rollout_tokens_per_s=161.0, train_tokens_per_s=1290.0,
                                       tokens=1380, unique_tokens=100, window=Window(head=12, size=3), mean_age=0.6,
                                       max_age=1, wait_s=0.5, train_s=0.4, sync_s=0.1, step_s=1.0,
                                       trainer_idle=0.5, engine_idle=0.25))
    display.update("eval", EvalMetrics(step=3, success=0.3125, success_by_suite={"calc-1": 0.3125}))
    text = _render(display)
    for needle in ("training", "3 / 10 · v7", "37.5%", "31", "161", "1290", "13.80×", "head 12, W 3", "mean 0.60, max 1",
                   "trainer 50 % (waiting for groups)", "engine 25 % (no request in flight)"):
        assert needle in text, (needle, text)


def test_without_a_terminal_progress_is_plain_lines_every_evaluation_and_every_ten_steps():
    from forge_cli.commands.train import PLAIN_EVERY, progress_line

    def step(n: int) -> StepMetrics:
        return StepMetrics(step=n, policy_version=n + 1, reward_mean=0.25, success=0.5, samples_per_s=12.34)

    lines = [progress_line("step", step(n), heldout=0.3125) for n in range(1, 31)]
    shown = [n for n, line in zip(range(1, 31), lines) if line]
    assert shown == [1, PLAIN_EVERY, 2 * PLAIN_EVERY, 3 * PLAIN_EVERY]
    assert lines[PLAIN_EVERY - 1] == ("step 10 (v11): reward +0.250, success 50.0% (train), 31.2% (held-out, last "
                                      "evaluation), 12.3 trajectories/s")
    assert progress_line("eval", EvalMetrics(step=20, success=0.25)) == "eval at step 20: held-out success 25.0%"
    assert progress_line("status", {"status": "final held-out evaluation"}) == "[final held-out evaluation]"
    assert progress_line("warmstart", WarmstartMetrics(step=150, loss=0.5, lr=1e-3)) is None
    assert progress_line("warmstart", WarmstartMetrics(step=150, loss=0.5, lr=1e-3, heldout_success=0.1)).endswith(
        "held-out success 10.0%")
    assert progress_line("step", StepMetrics(step=7)) is None


def test_the_run_ends_with_one_sentence_before_after_best_and_where_the_report_is(tmp_path):
    from forge_cli.commands.train import ending
    from forge_cli.train.loop import TrainResult

    result = TrainResult(tmp_path / "runs" / "demo", steps=120, policy_version=121, status="finished",
                         best_heldout_success=0.5, first_heldout_success=0.125, last_heldout_success=0.4375)
    line = ending(result)
    assert "\n" not in line and line.count(".") >= 1
    assert line.startswith("Finished after 120 steps (policy v121): held-out success 12.5% → 43.8% (best 50.0%)")
    assert f"forge report demo` (into {tmp_path / 'runs' / 'demo' / 'report'})" in line
    unmeasured = ending(TrainResult(tmp_path / "x", 0, 0, "stopped", None))
    assert unmeasured.startswith("Stopped after 0 steps (policy v0): held-out success — → — (best —)")


def test_infrastructure_failures_are_counted_apart_from_the_policys():
    """The rollout's live counts, as the loop reports them: a failure the policy could not cause is its own
    row (its group dropped, never trained as a 0), not among the policy's."""
    from types import SimpleNamespace

    from forge_cli.rollout.driver import RolloutProgress
    from forge_cli.rollout.records import TrajectoryResult
    from forge_cli.train.loop import StepMeter

    progress = RolloutProgress(total=None)
    progress.count(TrajectoryResult("t1", "g1", "k1", "failed", None, "the sandbox did not start", 1.0, 0, infra="sandbox"))
    progress.count(TrajectoryResult("t2", "g2", "k2", "completed", 1.0, "ok", 1.0, 0, attempts=3))
    progress.count(TrajectoryResult("t3", "g2", "k2", "completed", 0.0, "wrong", 1.0, 0))
    progress.dropped_groups = 1
    display = TrainDisplay()
    StepMeter(SimpleNamespace(engine=SimpleNamespace(busy_seconds=lambda: 0.0))).report(progress, display.update)
    text = _render(display)
    assert "0 running, 3 finished, 1 solved" in text, text
    assert "infrastructure failures 1 · groups dropped (not trained) 1 · ran again 1" in " ".join(
        text.replace("│", " ").split()), text
    clean = RolloutProgress(total=None)
    clean.count(TrajectoryResult("t4", "g3", "k3", "completed", 1.0, "ok", 1.0, 0))
    StepMeter(SimpleNamespace(engine=SimpleNamespace(busy_seconds=lambda: 0.0))).report(clean, display.update)
    assert "infrastructure failures" not in _render(display)

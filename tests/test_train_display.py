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

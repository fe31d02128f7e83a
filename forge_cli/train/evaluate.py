"""Held-out evaluation during training: the policy the engine serves now, sampled as it is trained
(the scaffold's temperature), several samples per held-out task.

It is an ordinary rollout through the same gateway, scaffolds and verifiers, recorded in the
run's pool as *evaluation* groups (:meth:`~forge_cli.pool.store.DataPool.submit_group`'s
``evaluation``): no scheduler ever trains on them and they take no admission slot. The loop runs
it between two train steps, so no weight swap happens while it samples.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from forge_cli.records.metrics import EvalMetrics
from forge_cli.rollout.driver import rollout
from forge_cli.rollout.records import request_from_config


@dataclass(frozen=True)
class Evaluation:
    """One held-out evaluation's figures."""

    policy_version: int
    success: float  # share of the sampled trajectories whose outcome is right
    reward_mean: float | None
    tasks: int
    samples_per_task: int
    success_by_suite: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    solved_seconds: float | None = None  # mean wall time of the solved trajectories
    solved_tool_calls: float | None = None  # ... and their mean tool calls

    def metrics(self, step: int) -> EvalMetrics:
        """Its ``metrics.jsonl`` line, after train step ``step``."""
        return EvalMetrics(step=step, policy_version=self.policy_version, split="heldout", success=self.success,
                           success_by_suite=self.success_by_suite, reward_mean=self.reward_mean, tasks=self.tasks,
                           samples_per_task=self.samples_per_task, seconds=round(self.seconds, 3),
                           solved_seconds=self.solved_seconds, solved_tool_calls=self.solved_tool_calls)


def eval_request(config: Any, tasks: int, samples_per_task: int) -> Any:
    """The held-out rollout: the same scaffold and suites as training, the first ``tasks`` held-out
    tasks (the same ones at every evaluation, so the figures compare)."""
    return request_from_config(config, split="heldout", groups=tasks, n=samples_per_task, first_group=0, evaluation=True)


async def evaluate_heldout(config: Any, run: Any, gateway: Any, *, tasks: int, samples_per_task: int) -> Evaluation:
    """Sample ``samples_per_task`` trajectories on each of ``tasks`` held-out tasks with the weights
    ``run``'s engine serves now, through ``gateway``; return the success rate (in all and per suite)."""

    started = time.monotonic()
    summary = await rollout(config, eval_request(config, tasks, samples_per_task), gateway=gateway)
    by_suite = {name: solved / total for name, (solved, total) in summary.by_suite.items() if total}
    return Evaluation(policy_version=run.version, success=summary.success_rate, reward_mean=summary.mean_reward,
                      tasks=tasks, samples_per_task=samples_per_task, success_by_suite=by_suite,
                      seconds=time.monotonic() - started, solved_seconds=summary.solved_seconds,
                      solved_tool_calls=summary.solved_tool_calls)

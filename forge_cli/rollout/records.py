"""The rollout's own records: what to roll out (:class:`RolloutRequest`, from ``[rollout]`` by
:func:`request_from_config`) and one finished trajectory as the summary counts it
(:class:`TrajectoryResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RolloutRequest:
    """What to roll out: ``groups`` tasks of ``suite``'s ``split`` (or of ``mix``'s suites), ``n``
    trajectories each, in ``scaffold`` (or ``scaffold_mix``'s scaffolds, by turns).

    ``groups=None`` is an unbounded stream (only with a consumer, ``forge train``: it runs until the
    caller cancels it); ``first_group`` is the stream's first group index (a resumed run passes the
    number of groups its pool already has, so it goes on with new tasks); ``mix`` maps suite names
    to weights (empty: ``suite`` alone) and each group's suite is drawn by weight from ``seed``.
    """

    scaffold: str
    suite: str  # a registered suite's name, or a JSONL file of tasks (with ``verifier``)
    verifier: str | None = None
    split: str = "train"
    groups: int | None = 4
    n: int = 8
    concurrency: int = 8
    trajectory_timeout_s: float = 600.0
    infra_retries: int = 2  # an infrastructure failure: runs again afresh, then its group is dropped
    max_tokens_per_trajectory: int | None = None
    seed: int = 0
    executor: str = "local"  # a name in forge_cli.rollout.executors.EXECUTORS
    ray_address: str | None = None
    gateway_url: str | None = None  # a running `forge gateway serve` instead of an in-process one
    admin_key: str | None = field(default=None, repr=False)
    first_group: int = 0
    mix: dict[str, float] = field(default_factory=dict)
    scaffold_mix: dict[str, float] = field(default_factory=dict)  # scaffold -> weight (empty: scaffold alone)
    evaluation: bool = False  # a held-out evaluation's groups: recorded, never trained on (forge train)

    @property
    def weights(self) -> dict[str, float]:
        """Suite → weight: the mix, or ``suite`` alone."""
        return dict(self.mix) if self.mix else {self.suite: 1.0}

    @property
    def label(self) -> str:
        """What the tasks are, for a title: ``calc`` or ``calc=2, qa=1``."""
        return _label(self.mix, self.suite)

    @property
    def scaffolds(self) -> dict[str, float]:
        """Scaffold → weight: the scaffold mix, or ``scaffold`` alone."""
        return dict(self.scaffold_mix) if self.scaffold_mix else {self.scaffold: 1.0}

    @property
    def scaffold_label(self) -> str:
        """Which scaffolds run, for a title: ``react`` or ``aider=1, pi=1``."""
        return _label(self.scaffold_mix, self.scaffold)


def _label(mix: dict[str, float], alone: str) -> str:
    """A mix for a title (``a=2, b=1``), or the one name when there is none."""
    return ", ".join(f"{k}={w:g}" for k, w in mix.items()) if mix else alone


def request_from_config(config: Any, **overrides: Any) -> RolloutRequest:
    """The request ``[rollout]`` (with ``train.group_size`` and ``run.seed``) describes; ``overrides``
    replace fields (``groups=None, first_group=k`` for forge train, ``gateway_url``, …)."""
    r = config.rollout
    fields: dict[str, Any] = dict(
        scaffold=r.scaffold, suite=r.task, verifier=r.verifier, split=r.split, groups=r.groups, n=config.train.group_size,
        concurrency=r.concurrency, trajectory_timeout_s=r.trajectory_timeout_s, infra_retries=r.infra_retries,
        max_tokens_per_trajectory=r.max_tokens_per_trajectory, seed=config.run.seed, executor=r.executor,
        ray_address=r.ray_address, mix=dict(r.mix), scaffold_mix=dict(r.scaffold_mix))
    return RolloutRequest(**(fields | overrides))


@dataclass(frozen=True)
class TrajectoryResult:
    """One finished trajectory, as the summary counts it."""

    trajectory_id: str
    group_id: str
    task_id: str
    status: str  # completed | failed | timed_out
    score: float | None
    reason: str
    wall_s: float
    events: int
    rewards: dict[str, float] = field(default_factory=dict)
    suite: str = ""  # the key of its task's suite in the request's weights
    scaffold: str = ""  # the scaffold it ran in
    infra: str | None = None  # failed for a reason its policy could not cause: the cause (pool.types.INFRA_CAUSES)
    attempts: int = 1  # runs it took (more than one: infrastructure failures before it, retried)

    @property
    def solved(self) -> bool:
        return self.score is not None and self.score >= 1.0

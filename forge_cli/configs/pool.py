"""``[pool]``: the data pool, and ``[pool.scheduler]``, which finished groups the trainer may take.

``[pool.scheduler]`` is one of the ``…SchedulerConfig`` members below, told apart by ``type``; the
rule each name applies (its window, its admission bound) is in
:data:`forge_cli.pool.scheduler.SCHEDULERS`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from forge_cli.configs.common import Section
from forge_cli.unions import name_table, tagged_union


class WindowedFIFOSchedulerConfig(Section):
    """The default: any complete group among the ``W`` oldest active ones."""

    type: Literal["windowed_fifo"] = "windowed_fifo"
    window_fraction: float = Field(0.3, gt=0.0, le=1.0, description="W = ceil(window_fraction · max_active_groups).")


class FIFOSchedulerConfig(Section):
    """Strict FIFO (W = 1): only the head, ever."""

    type: Literal["fifo"] = "fifo"


class GreedySchedulerConfig(Section):
    """Greedy (W = ∞): any complete group — fast, easy tasks skew the data; for comparison."""

    type: Literal["greedy"] = "greedy"


class BoundedStalenessSchedulerConfig(Section):
    """Greedy (W = ∞) with a staleness cap: any complete group is taken, and admission holds the
    rollouts back so that no sample is trained more than ``max_head_offpolicyness`` versions after
    the version that sampled it (AReaL's bound, taken relative to the queue's head so that a slow
    group cannot be overtaken for ever: :func:`forge_cli.pool.scheduler.staleness_limit`)."""

    type: Literal["bounded_staleness"] = "bounded_staleness"
    max_head_offpolicyness: int = Field(2, ge=0, description=(
        "S: every sample is trained at most S versions after the version that sampled it (0: synchronous)."))


class StalenessCapSchedulerConfig(Section):
    """Greedy takes (W = ∞) with a staleness cap on the takes: all ``max_active_groups`` stay in flight, and
    each step takes the groups whose deadline (the version they were submitted at + ``max_staleness``) has
    come, waiting for them if they are unfinished, then the oldest complete ones
    (:func:`forge_cli.pool.scheduler.select_capped`). The hard cap to choose: at the same bound it keeps
    more of greedy's throughput than ``bounded_staleness``, which holds admission back instead, and than
    the window (benchmarks/RESULTS.md, "Scheduler simulation"). Needs ``max_active_groups ≤ (max_staleness
    + 1) · groups_per_step``."""

    type: Literal["staleness_cap"] = "staleness_cap"
    max_staleness: int = Field(3, ge=0, description=(
        "S: every group is trained at most S versions after the version it was submitted at; needs "
        "pool.max_active_groups <= (S + 1) x train.groups_per_step."))


def staleness_cap_error(pool: "PoolConfig", groups_per_step: int) -> str | None:
    """Why ``pool``'s ``staleness_cap`` cannot hold with ``groups_per_step`` groups a step (more groups could
    come due in one step than a step takes); None when it can, or when the scheduler has no such cap."""
    scheduler = pool.scheduler
    if not isinstance(scheduler, StalenessCapSchedulerConfig):
        return None
    most = (scheduler.max_staleness + 1) * groups_per_step
    if pool.max_active_groups <= most:
        return None
    least = -(-pool.max_active_groups // groups_per_step) - 1
    return (f"pool.scheduler.max_staleness = {scheduler.max_staleness} cannot hold with pool.max_active_groups = "
            f"{pool.max_active_groups} and train.groups_per_step = {groups_per_step}: it needs max_active_groups "
            f"<= (max_staleness + 1) x groups_per_step = {most}; set max_staleness to {least} or more, or "
            f"max_active_groups to {most} or less")


_MEMBERS = (WindowedFIFOSchedulerConfig, FIFOSchedulerConfig, GreedySchedulerConfig, BoundedStalenessSchedulerConfig,
            StalenessCapSchedulerConfig)
SchedulerConfig = tagged_union(*_MEMBERS)
SCHEDULER_CONFIGS: dict[str, type[Section]] = name_table(*_MEMBERS)


class PoolConfig(Section):
    """The data pool and the scheduler that feeds the trainer (DESIGN.md §4)."""

    url: str = Field("sqlite", description='"sqlite" (a file in the run folder) or "postgresql://…".')
    scheduler: SchedulerConfig = Field(default_factory=WindowedFIFOSchedulerConfig, description=(
        'Which finished groups the trainer may take: [pool.scheduler] with type = "windowed_fifo" (and window_fraction) '
        '| "fifo" (W = 1) | "greedy" (W = ∞) | "bounded_staleness" (and max_head_offpolicyness) | "staleness_cap" '
        '(and max_staleness).'))
    max_active_groups: int = Field(16, gt=0, description="N: groups submitted and not yet consumed.")
    group_timeout_s: float = Field(1800.0, gt=0, description="A head group older than this is marked timed out.")
    on_timeout: Literal["drop", "train"] = Field(
        "drop", description="What to do with a timed-out group: drop it, or train on it with its failure reward."
    )

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


_MEMBERS = (WindowedFIFOSchedulerConfig, FIFOSchedulerConfig, GreedySchedulerConfig, BoundedStalenessSchedulerConfig)
SchedulerConfig = tagged_union(*_MEMBERS)
SCHEDULER_CONFIGS: dict[str, type[Section]] = name_table(*_MEMBERS)


class PoolConfig(Section):
    """The data pool and the scheduler that feeds the trainer (DESIGN.md §4)."""

    url: str = Field("sqlite", description='"sqlite" (a file in the run folder) or "postgresql://…".')
    scheduler: SchedulerConfig = Field(default_factory=WindowedFIFOSchedulerConfig, description=(
        'Which finished groups the trainer may take: [pool.scheduler] with type = "windowed_fifo" (and window_fraction) '
        '| "fifo" (W = 1) | "greedy" (W = ∞).'))
    max_active_groups: int = Field(16, gt=0, description="N: groups submitted and not yet consumed.")
    group_timeout_s: float = Field(1800.0, gt=0, description="A head group older than this is marked timed out.")
    on_timeout: Literal["drop", "train"] = Field(
        "drop", description="What to do with a timed-out group: drop it, or train on it with its failure reward."
    )

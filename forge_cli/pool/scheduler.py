"""Which finished groups the trainer may take next (DESIGN.md §4).

The generation queue is ``Q = [G_0, G_1, …]`` in submission order; the head ``i`` is the oldest
group not yet consumed. A scheduler with window ``W`` may take any *complete* group in
``[G_i, G_{i+W-1}]``, in any order, and never one at index ``≥ i + W``, however finished; the
window moves only when the head is consumed. ``W = 1`` is strict FIFO, ``W = ∞`` greedy.

``bounded_staleness`` is greedy with a staleness cap ``S`` (AReaL's ``max_head_offpolicyness``):
it takes any complete group, and admission — not a drop — keeps every sample within ``S`` versions
(:func:`staleness_limit`).

A head that has outlived its time budget is marked timed out so one dead agent cannot stall
training: ``on_timeout = "drop"`` removes it from the queue untrained, ``"train"`` closes its
unfinished trajectories as timed out and lets it be taken with whatever reward they earn.

:func:`select` is pure (no database, no clock of its own), which is what the property tests
exercise; :class:`~forge_cli.pool.store.DataPool.take_batch` applies its decision atomically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from forge_cli.unions import name_table, tagged_union

OnTimeout = Literal["drop", "train"]


@dataclass(frozen=True)
class QueueEntry:
    """One active (not yet consumed) group as the scheduler sees it."""

    queue_index: int
    group_id: str
    complete: bool  # every trajectory is in a terminal state
    submitted_at: float
    timeout_s: float | None = None

    def expired(self, now: float) -> bool:
        return self.timeout_s is not None and now - self.submitted_at > self.timeout_s


@dataclass(frozen=True)
class Decision:
    """What to take (in order), and which heads timed out (dropped or to be closed)."""

    take: list[str]
    timed_out: list[str] = field(default_factory=list)
    head_before: int | None = None


class _SchedulerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    uses_head_version: ClassVar[bool] = False  # whether max_in_flight reads head_version

    def window(self, max_active_groups: int) -> int | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def max_in_flight(self, max_active_groups: int, groups_per_step: int, version: int, head_version: int | None) -> int:
        """The admission bound for the next submission: at most this many groups in flight once it is
        in (the pool's count: submitted and not consumed, or consumed at a version not yet published).
        ``version``: the rollout engine's; ``head_version``: the engine's version when the oldest active
        group was submitted (None: no active group). Only a staleness cap uses the two."""
        return max_active_groups


class WindowedFIFOScheduler(_SchedulerConfig):
    """The default: any complete group among the ``W`` oldest active ones."""

    type: Literal["windowed_fifo"] = "windowed_fifo"
    window_fraction: float = Field(0.3, gt=0.0, le=1.0, description="W = ceil(window_fraction · max_active_groups).")

    def window(self, max_active_groups: int) -> int:
        return max(1, math.ceil(self.window_fraction * max_active_groups))


class FIFOScheduler(_SchedulerConfig):
    """Strict FIFO (W = 1): only the head, ever."""

    type: Literal["fifo"] = "fifo"

    def window(self, max_active_groups: int) -> int:
        return 1


class GreedyScheduler(_SchedulerConfig):
    """Greedy (W = ∞): any complete group — fast, easy tasks skew the data; for comparison."""

    type: Literal["greedy"] = "greedy"

    def window(self, max_active_groups: int) -> None:
        return None


class BoundedStalenessScheduler(_SchedulerConfig):
    """Greedy (W = ∞) with a staleness cap: any complete group is taken, and admission holds the
    rollouts back so that no sample is trained more than ``max_head_offpolicyness`` versions after
    the version that sampled it (AReaL's bound, taken relative to the queue's head so that a slow
    group cannot be overtaken for ever: :func:`staleness_limit`)."""

    type: Literal["bounded_staleness"] = "bounded_staleness"
    uses_head_version: ClassVar[bool] = True
    max_head_offpolicyness: int = Field(2, ge=0, description=(
        "S: every sample is trained at most S versions after the version that sampled it (0: synchronous)."))

    def window(self, max_active_groups: int) -> None:
        return None

    def max_in_flight(self, max_active_groups: int, groups_per_step: int, version: int, head_version: int | None) -> int:
        return min(max_active_groups, staleness_limit(self.max_head_offpolicyness, groups_per_step, version, head_version))


# ``[pool.scheduler]``: the one table of scheduler names, each member with its own fields
_MEMBERS = (WindowedFIFOScheduler, FIFOScheduler, GreedyScheduler, BoundedStalenessScheduler)
SchedulerConfig = tagged_union(*_MEMBERS)
SCHEDULER_CONFIGS: dict[str, type[_SchedulerConfig]] = name_table(*_MEMBERS)


def staleness_limit(cap: int, groups_per_step: int, version: int, head_version: int | None) -> int:
    """The most groups in flight, the new one included, that keep every sample within ``cap`` versions.

    The rule is AReaL's ``(cap + version + 1) · P`` over the groups submitted and not dropped, but
    with the version at which the queue's head (its oldest active group) was submitted in place of
    the current one: in flight = submitted − ``version · P`` (consumed at earlier steps, P a step), so

        in flight ≤ (cap + 1 − (version − head_version)) · P.

    Why every sample: a group ``g`` submitted at version ``v_g`` samples at versions ≥ ``v_g``.
    While ``g`` is unconsumed the head's version is ≤ ``v_g``, so no more than ``(v_g + 1 + cap) · P``
    groups, ``g`` among them, are ever submitted and not dropped; steps ``0 … v_g + cap`` take
    ``(v_g + cap + 1) · P`` of them, so one of those steps takes ``g``: its age is ≤ ``cap``. With the
    current version alone (AReaL's form) a straggler can be overtaken for ever under greedy takes.
    ``head_version`` None (nothing active): the new group will be the head, at ``version``.
    """
    age = 0 if head_version is None else max(0, version - head_version)
    return max(0, (cap + 1 - age) * groups_per_step)


def select(
    active: list[QueueEntry],
    max_groups: int,
    window: int | None,
    now: float,
    on_timeout: OnTimeout = "drop",
    min_groups: int = 1,
) -> Decision:
    """Choose up to ``max_groups`` complete groups under the window rule, oldest first.

    ``active`` holds every submitted, unconsumed group. Taking the head moves the window at
    once, so one call behaves exactly like ``max_groups`` calls that take one group each.
    With ``min_groups``, fewer eligible groups than that means none is taken: a trainer that takes
    its P groups at once keeps the staleness bound of DESIGN.md §4, which partial takes would
    loosen by one version (they let the rollout side refill early). Only a group that is the head
    of the queue as it really stands after the takes before it times out, so a discarded take
    keeps just the timeouts that came before its first group (the real head, and with ``"drop"``
    the heads behind it that it uncovers).
    """
    if window is not None and window < 1:
        raise ValueError("window must be >= 1 (or None for greedy)")
    remaining = sorted(active, key=lambda e: e.queue_index)
    head_before = remaining[0].queue_index if remaining else None
    take: list[str] = []
    timed_out: list[str] = []
    before_first_take: int | None = None  # how many heads timed out before the first take
    while remaining and len(take) < max_groups:
        head = remaining[0]
        if not head.complete and head.expired(now):
            timed_out.append(head.group_id)
            if on_timeout == "drop":
                remaining.pop(0)
                continue
            remaining[0] = head = replace(head, complete=True)
        limit = head.queue_index + window if window is not None else math.inf
        chosen = next((e for e in remaining if e.complete and e.queue_index < limit), None)
        if chosen is None:
            break
        if before_first_take is None:
            before_first_take = len(timed_out)
        take.append(chosen.group_id)
        remaining.remove(chosen)
    if len(take) < min_groups:
        # the takes will not happen, so neither do the timeouts of the heads they would have uncovered
        take = []
        if before_first_take is not None:
            timed_out = timed_out[:before_first_take]
    return Decision(take=take, timed_out=timed_out, head_before=head_before)


@dataclass(frozen=True)
class Scheduler:
    """The scheduler a run's ``[pool]`` config chooses, applied to a pool.

    ``take`` hands the trainer exactly ``groups_per_step`` groups or none (all or nothing, which
    keeps the staleness bound), after timing out a stalled head.
    """

    name: str  # a type in SCHEDULER_CONFIGS
    window: int | None
    groups_per_step: int
    on_timeout: OnTimeout
    group_timeout_s: float
    max_active_groups: int
    policy: _SchedulerConfig = field(default_factory=lambda: WindowedFIFOScheduler())  # the [pool.scheduler] member

    @classmethod
    def from_config(cls, pool: Any, groups_per_step: int) -> "Scheduler":
        return cls(
            name=pool.scheduler.type,
            window=pool.scheduler.window(pool.max_active_groups),
            groups_per_step=groups_per_step,
            on_timeout=pool.on_timeout,
            group_timeout_s=pool.group_timeout_s,
            max_active_groups=pool.max_active_groups,
            policy=pool.scheduler,
        )

    def max_in_flight(self, version: int, head_version: int | None) -> int:
        """The admission bound for the next group (see :meth:`_SchedulerConfig.max_in_flight`)."""
        return self.policy.max_in_flight(self.max_active_groups, self.groups_per_step, version, head_version)

    def head(self, pool: Any) -> int | None:
        """The queue index of the pool's head (its oldest active group) where the admission bound
        needs it (its submission version is the submitter's to know); else None, without a read."""
        if not self.policy.uses_head_version:
            return None
        return pool.stats()["queue"]["head"]

    def submit(self, pool: Any, task_id: str, n: int, scaffold: str, *, version: int = 0,
               head_version: int | None = None, rewards_pending: bool = False) -> Any:
        """Submit a group under this scheduler's admission bound (:meth:`max_in_flight`) and time
        budget (may raise PoolFull)."""
        return pool.submit_group(
            task_id, n, scaffold, max_active=self.max_in_flight(version, head_version), timeout_s=self.group_timeout_s,
            rewards_pending=rewards_pending,
        )

    def take(self, pool: Any, trainer_version: int) -> Any:
        """One train step's batch, or an empty batch if fewer than ``groups_per_step`` are ready."""
        return pool.take_batch(
            self.groups_per_step, trainer_version, window=self.window, on_timeout=self.on_timeout,
            min_groups=self.groups_per_step,
        )

"""Which finished groups the trainer may take next (DESIGN.md §4).

The generation queue is ``Q = [G_0, G_1, …]`` in submission order; the head ``i`` is the oldest
group not yet consumed. A scheduler with window ``W`` may take any *complete* group in
``[G_i, G_{i+W-1}]``, in any order, and never one at index ``≥ i + W``, however finished; the
window moves only when the head is consumed. ``W = 1`` is strict FIFO, ``W = ∞`` greedy.

``bounded_staleness`` is greedy with a staleness cap ``S`` (AReaL's ``max_head_offpolicyness``):
it takes any complete group, and admission — not a drop — keeps every sample within ``S`` versions
(:func:`staleness_limit`). ``staleness_cap`` is the same cap acting on the takes instead
(:func:`select_capped`), with all ``N`` groups kept in flight, by the version each group was submitted
at (the pool records it); ``benchmarks/scheduler_sim.py`` compares the two like for like.

A head that has outlived its time budget is marked timed out so one dead agent cannot stall
training: ``on_timeout = "drop"`` removes it from the queue untrained, ``"train"`` closes its
unfinished trajectories as timed out and lets it be taken with whatever reward they earn.

:func:`select` is pure (no database, no clock of its own), which is what the property tests
exercise; :class:`~forge_cli.pool.store.DataPool.take_batch` applies its decision atomically.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from forge_cli.configs.pool import WindowedFIFOSchedulerConfig, staleness_cap_error
from forge_cli.errors import ForgeError

OnTimeout = Literal["drop", "train"]


@dataclass(frozen=True)
class QueueEntry:
    """One active (not yet consumed) group as the scheduler sees it."""

    queue_index: int
    group_id: str
    complete: bool  # every trajectory is in a terminal state
    submitted_at: float
    timeout_s: float | None = None
    version: int | None = None  # the policy version it was submitted at (only select_capped reads it)

    def expired(self, now: float) -> bool:
        return self.timeout_s is not None and now - self.submitted_at > self.timeout_s


@dataclass(frozen=True)
class Decision:
    """What to take (in order), and which heads timed out (dropped or to be closed)."""

    take: list[str]
    timed_out: list[str] = field(default_factory=list)
    head_before: int | None = None


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


@dataclass(frozen=True)
class SchedulerRule:
    """What one ``[pool.scheduler]`` type does: its window ``W`` (None: ∞) for ``N`` active groups,
    its admission bound (None: ``N``; else from ``(N, P, version, head_version)``, which
    reads the version at which the queue's head was submitted), and its cap on the takes (None: none)."""

    window: Callable[[Any, int], int | None]
    max_in_flight: Callable[[Any, int, int, int, int | None], int] | None = None
    cap: Callable[[Any], int] | None = None  # a staleness cap on the takes (select_capped), instead of the window


# ``pool.scheduler``: each scheduler's name (forge_cli.configs.pool) -> its rule
SCHEDULERS: dict[str, SchedulerRule] = {
    "windowed_fifo": SchedulerRule(window=lambda c, n: max(1, math.ceil(c.window_fraction * n))),
    "fifo": SchedulerRule(window=lambda c, n: 1),
    "greedy": SchedulerRule(window=lambda c, n: None),
    "bounded_staleness": SchedulerRule(
        window=lambda c, n: None,
        max_in_flight=lambda c, n, p, version, head: min(n, staleness_limit(c.max_head_offpolicyness, p, version, head))),
    "staleness_cap": SchedulerRule(window=lambda c, n: None, cap=lambda c: c.max_staleness),
}


def window_size(config: Any, max_active_groups: int) -> int | None:
    """The window ``W`` of a ``[pool.scheduler]`` config for ``max_active_groups`` (None: greedy)."""
    return SCHEDULERS[config.type].window(config, max_active_groups)


def admission_bound(config: Any, max_active_groups: int, groups_per_step: int, version: int, head_version: int | None) -> int:
    """The admission bound for the next submission: at most this many groups in flight once it is
    in (the pool's count: submitted and not consumed, or consumed at a version not yet published).
    ``version``: the rollout engine's; ``head_version``: the engine's version when the oldest active
    group was submitted (None: no active group). Only a staleness cap uses the two."""
    rule = SCHEDULERS[config.type].max_in_flight
    return max_active_groups if rule is None else rule(config, max_active_groups, groups_per_step, version, head_version)


def uses_head_version(config: Any) -> bool:
    """Whether the admission bound of ``config`` reads the head's version."""
    return SCHEDULERS[config.type].max_in_flight is not None


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


def select_capped(
    active: list[QueueEntry],
    groups_per_step: int,
    version: int,
    cap: int,
    now: float,
    on_timeout: OnTimeout = "drop",
) -> Decision:
    """Greedy takes under a staleness cap that acts on the takes, not on admission: every group is
    taken within ``cap`` versions of the version it was submitted at (``QueueEntry.version``).

    The step at ``version`` takes exactly ``groups_per_step`` complete groups, or none. For each
    deadline ``D`` (submission version + ``cap``) it must take at least ``(active groups due by D) −
    (D − version) · groups_per_step`` of them, since later steps cannot take more: earliest deadlines
    first, oldest first among equals. Then it fills up with the oldest complete groups, as greedy does.
    If a group it must take is unfinished it takes nothing (the trainer waits); such a group past its
    time budget times out (dropped, or closed and taken with ``"train"``), as does an unfinished head
    past its budget, the one timeout :func:`select` knows. With ``N`` groups in flight (the pool's
    count) and ``N ≤ (cap + 1) · groups_per_step`` the demand never exceeds one step, so no group is
    trained more than ``cap`` versions after its submission (property-tested). Where more are due than
    one step takes (a smaller cap with ``N`` in flight, or a resumed run's given-back groups), the step
    takes the ``groups_per_step`` with the earliest deadlines — still waiting for an unfinished one, still
    timing them out — and those over the cap are trained as soon as the backlog lets them.
    """
    if cap < 0 or groups_per_step < 1:
        raise ValueError("cap must be >= 0 and groups_per_step >= 1")
    if any(e.version is None for e in active):
        raise ValueError("select_capped needs each group's submission version (QueueEntry.version)")
    queue = sorted(active, key=lambda e: (e.version, e.queue_index))
    head_before = min((e.queue_index for e in queue), default=None)
    timed_out: list[str] = []

    def time_out(entries: list[QueueEntry]) -> None:
        nonlocal queue
        gone = {e.group_id for e in entries}
        timed_out.extend(e.group_id for e in entries)
        if on_timeout == "drop":
            queue = [e for e in queue if e.group_id not in gone]
        else:
            queue = [replace(e, complete=True) if e.group_id in gone else e for e in queue]

    while queue:  # an unfinished head past its budget times out, as in select
        head = min(queue, key=lambda e: e.queue_index)
        if head.complete or not head.expired(now):
            break
        time_out([head])
    while True:
        chosen: list[str] = []
        blocked: list[QueueEntry] = []
        for j, e in enumerate(queue):
            if j + 1 < len(queue) and queue[j + 1].version == e.version:
                continue  # not the last group due at its deadline
            # of queue[:j + 1], this step; more than a step takes: a backlog, the earliest deadlines first
            need = min(j + 1 - (e.version + cap - version) * groups_per_step, groups_per_step)
            if need <= len(chosen):
                continue
            for f in queue[: j + 1]:
                if len(chosen) < need and f.complete and f.group_id not in chosen:
                    chosen.append(f.group_id)
            if len(chosen) < need:
                blocked = [f for f in queue[: j + 1] if not f.complete]
                if blocked:
                    break  # (none unfinished: a backlog's clamped need with every due group chosen — go on)
        if blocked:
            expired = [f for f in blocked if f.expired(now)]
            if not expired:
                return Decision(take=[], timed_out=timed_out, head_before=head_before)
            time_out(expired)
            continue
        for f in sorted(queue, key=lambda f: f.queue_index):
            if len(chosen) < groups_per_step and f.complete and f.group_id not in chosen:
                chosen.append(f.group_id)
        return Decision(take=chosen if len(chosen) == groups_per_step else [], timed_out=timed_out, head_before=head_before)


@dataclass(frozen=True)
class Scheduler:
    """The scheduler a run's ``[pool]`` config chooses, applied to a pool.

    ``take`` hands the trainer exactly ``groups_per_step`` groups or none (all or nothing, which
    keeps the staleness bound), after timing out a stalled head.
    """

    name: str  # a type in SCHEDULERS
    window: int | None
    groups_per_step: int
    on_timeout: OnTimeout
    group_timeout_s: float
    max_active_groups: int
    policy: Any = field(default_factory=WindowedFIFOSchedulerConfig)  # the [pool.scheduler] member
    cap: int | None = None  # a staleness cap on the takes (select_capped) instead of the window

    @classmethod
    def from_config(cls, pool: Any, groups_per_step: int) -> Scheduler:
        """The scheduler of a ``[pool]`` config; ForgeError for a staleness cap that cannot hold with
        ``max_active_groups`` in flight (more groups could come due in one step than a step takes)."""
        if (error := staleness_cap_error(pool, groups_per_step)) is not None:
            raise ForgeError(error)
        cap = SCHEDULERS[pool.scheduler.type].cap
        return cls(
            name=pool.scheduler.type,
            window=window_size(pool.scheduler, pool.max_active_groups),
            groups_per_step=groups_per_step,
            on_timeout=pool.on_timeout,
            group_timeout_s=pool.group_timeout_s,
            max_active_groups=pool.max_active_groups,
            policy=pool.scheduler,
            cap=None if cap is None else cap(pool.scheduler),
        )

    def max_in_flight(self, version: int, head_version: int | None) -> int:
        """The admission bound for the next group (see :func:`admission_bound`)."""
        return admission_bound(self.policy, self.max_active_groups, self.groups_per_step, version, head_version)

    def head(self, pool: Any) -> int | None:
        """The queue index of the pool's head (its oldest active group) where the admission bound
        needs it (its submission version is the submitter's to know); else None, without a read."""
        if not uses_head_version(self.policy):
            return None
        return pool.stats()["queue"]["head"]

    def submit(self, pool: Any, task_id: str, n: int, scaffold: str, *, version: int = 0,
               head_version: int | None = None, rewards_pending: bool = False) -> Any:
        """Submit a group under this scheduler's admission bound (:meth:`max_in_flight`) and time
        budget (may raise PoolFull)."""
        return pool.submit_group(
            task_id, n, scaffold, max_active=self.max_in_flight(version, head_version), timeout_s=self.group_timeout_s,
            rewards_pending=rewards_pending, version=version,
        )

    def take(self, pool: Any, trainer_version: int) -> Any:
        """One train step's batch, or an empty batch if fewer than ``groups_per_step`` are ready."""
        return pool.take_batch(
            self.groups_per_step, trainer_version, window=self.window, on_timeout=self.on_timeout,
            min_groups=self.groups_per_step, cap=self.cap,
        )

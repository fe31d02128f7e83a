"""The window rule (DESIGN.md §4), as properties over random completion orders (hypothesis)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_cli.configs.pool import (SCHEDULER_CONFIGS, BoundedStalenessSchedulerConfig, FIFOSchedulerConfig, GreedySchedulerConfig,
                                    StalenessCapSchedulerConfig, WindowedFIFOSchedulerConfig)
from forge_cli.pool.scheduler import Decision, QueueEntry, admission_bound, select, select_capped, staleness_limit, window_size


def test_window_size():
    assert window_size(FIFOSchedulerConfig(), 16) == 1
    assert window_size(GreedySchedulerConfig(), 16) is None
    assert window_size(WindowedFIFOSchedulerConfig(window_fraction=0.3), 16) == 5  # ceil(4.8)
    assert window_size(WindowedFIFOSchedulerConfig(window_fraction=0.01), 16) == 1
    assert window_size(BoundedStalenessSchedulerConfig(), 16) is None
    assert window_size(StalenessCapSchedulerConfig(), 16) is None
    assert set(SCHEDULER_CONFIGS) == {"windowed_fifo", "fifo", "greedy", "bounded_staleness", "staleness_cap"}
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        WindowedFIFOSchedulerConfig(window_fraction=0)


class Queue:
    """A generation queue driven by random events, checking every take against the rule."""

    def __init__(self, n_groups: int, window: int | None, timeout: float | None = None) -> None:
        self.window = window
        self.complete: set[int] = set()
        self.consumed: list[int] = []
        self.timed_out: list[int] = []
        self.entries = {i: QueueEntry(i, f"g{i}", False, float(i), timeout) for i in range(n_groups)}
        self.now = float(n_groups)

    def head(self) -> int | None:
        gone = set(self.consumed) | set(self.timed_out)
        remaining = [i for i in self.entries if i not in gone]
        return min(remaining) if remaining else None

    def take(self, k: int, on_timeout: str = "drop") -> list[int]:
        gone = set(self.consumed) | set(self.timed_out)
        active = [
            QueueEntry(i, e.group_id, i in self.complete, e.submitted_at, e.timeout_s)
            for i, e in self.entries.items()
            if i not in gone
        ]
        decision = select(active, k, self.window, self.now, on_timeout)
        taken = [int(g[1:]) for g in decision.take]
        expired = [int(g[1:]) for g in decision.timed_out]
        # replay the take one group at a time and check the rule at each step
        order = iter(taken)
        for _ in taken:
            idx = next(order)
            while self.head() in expired and self.head() not in taken and on_timeout == "drop":
                self.timed_out.append(self.head())
            head = self.head()
            assert idx not in self.consumed, "a group was yielded twice"
            assert idx in self.complete or (on_timeout == "train" and idx in expired), "an unfinished group was yielded"
            if self.window is not None:
                assert idx < head + self.window, f"took {idx} with head {head} and W={self.window}"
            self.consumed.append(idx)
        for idx in expired:
            if idx not in self.consumed and idx not in self.timed_out:
                self.timed_out.append(idx)
        assert len(taken) <= k
        return taken


windows = st.one_of(st.none(), st.integers(1, 12))


@settings(max_examples=300, deadline=None)
@given(
    n_groups=st.integers(1, 30),
    window=windows,
    data=st.data(),
)
def test_window_rule_over_random_completion_orders(n_groups, window, data):
    q = Queue(n_groups, window)
    order = data.draw(st.permutations(range(n_groups)))
    takes = data.draw(st.lists(st.integers(1, 5), min_size=n_groups, max_size=n_groups))
    for idx, k in zip(order, takes):
        q.complete.add(idx)
        head_before = q.head()
        taken = q.take(k)
        # the head moves only when the head group is consumed
        if head_before is not None and head_before not in taken:
            assert q.head() == head_before
        # nothing eligible was left behind when the trainer asked for more
        if len(taken) < k and q.head() is not None:
            limit = math.inf if window is None else q.head() + window
            eligible = [i for i in q.complete if i not in q.consumed and i < limit]
            assert eligible == []
    # every completed group is eventually yielded exactly once
    while q.take(5):
        pass
    assert sorted(q.consumed) == list(range(n_groups))
    assert len(q.consumed) == len(set(q.consumed))


@settings(max_examples=200, deadline=None)
@given(n_groups=st.integers(2, 20), window=windows, stuck=st.data(), on_timeout=st.sampled_from(["drop", "train"]))
def test_a_never_finishing_group_cannot_block_forever(n_groups, window, stuck, on_timeout):
    dead = stuck.draw(st.integers(0, n_groups - 1))
    q = Queue(n_groups, window, timeout=100.0)
    q.complete.update(i for i in range(n_groups) if i != dead)
    while q.take(3, on_timeout):
        pass
    assert dead not in q.consumed and dead not in q.timed_out  # not yet past its budget
    q.now += 1000.0
    while q.take(3, on_timeout):
        pass
    alive = set(range(n_groups)) - {dead}
    assert alive <= set(q.consumed)
    if on_timeout == "drop":
        assert q.timed_out == [dead] and dead not in q.consumed
    else:
        assert dead in q.consumed


def test_fifo_and_greedy_extremes():
    entries = [QueueEntry(i, f"g{i}", i != 0, 0.0) for i in range(5)]
    assert select(entries, 5, 1, 0.0).take == []
    assert select(entries, 5, None, 0.0).take == ["g1", "g2", "g3", "g4"]
    assert select(entries, 5, 3, 0.0).take == ["g1", "g2"]
    done = [QueueEntry(i, f"g{i}", True, 0.0) for i in range(5)]
    assert select(done, 3, 1, 0.0).take == ["g0", "g1", "g2"]  # consuming the head moves the window


# ---- the staleness bound ------------------------------------------------------------------------------------


def simulate_staleness(S: int, P: int, W: int | None, finish_order_seed: int, steps: int = 40) -> int:
    """Admission N = (S+1)·P; completions stamped with the trainer version at submission
    (the oldest weights a trajectory can use). Returns the largest trainer_version − policy_version."""
    import random

    rng = random.Random(finish_order_seed)
    N = (S + 1) * P
    version = 0
    submitted: dict[int, int] = {}  # queue index -> policy version at submission
    entries: dict[int, QueueEntry] = {}
    finished: set[int] = set()
    consumed: set[int] = set()
    next_index = 0
    worst = 0
    for _ in range(steps):
        # the rollout side keeps N groups in flight
        while next_index - len(consumed) < N:
            submitted[next_index] = version
            entries[next_index] = QueueEntry(next_index, str(next_index), False, 0.0)
            next_index += 1
        # the trainer waits until it can take P groups; rollouts finish in random order meanwhile
        batch: list[int] = []
        while len(batch) < P:
            pending = [i for i in entries if i not in finished and i not in consumed]
            if pending:
                finished.add(rng.choice(pending))
            active = [QueueEntry(i, str(i), i in finished, 0.0) for i in entries if i not in consumed]
            got = [int(g) for g in select(active, P - len(batch), W, 0.0).take]
            consumed.update(got)
            batch += got
        worst = max([worst] + [version - submitted[i] for i in batch])
        version += 1
    return worst


@settings(max_examples=60, deadline=None)
@given(S=st.integers(0, 3), P=st.integers(1, 4), W=st.integers(1, 10), seed=st.integers(0, 10_000))
def test_staleness_bound(S, P, W, seed):
    """Strict FIFO keeps every sample within S versions; the window adds at most ceil((W-1)/P)."""
    assert simulate_staleness(S, P, 1, seed) <= S
    assert simulate_staleness(S, P, W, seed) <= S + math.ceil((W - 1) / P)


class CappedQueue:
    """Greedy takes under the staleness cap's admission, driven by an adversary (hypothesis) that
    picks which group finishes, when a stuck head times out, when the rollout side submits and when
    the trainer takes and publishes. Every completion is stamped with the version its group was
    submitted at (the oldest weights it can have used)."""

    def __init__(self, S: int, P: int, N: int) -> None:
        self.S, self.P, self.N = S, P, N
        self.version = 0  # the engine's, published with it (the trainer's loop keeps them equal)
        self.taken_unpublished = False  # a step took its groups; its weights are not out yet
        self.submitted: dict[int, int] = {}  # queue index -> version at submission
        self.complete: set[int] = set()
        self.expired: set[int] = set()
        self.consumed: dict[int, int] = {}  # queue index -> trainer version that took it
        self.dropped: set[int] = set()
        self.ages: list[int] = []

    def active(self) -> list[int]:
        return sorted(i for i in self.submitted if i not in self.consumed and i not in self.dropped)

    def in_flight(self) -> int:  # what the pool counts against max_active
        return len(self.active()) + sum(1 for step in self.consumed.values() if step >= self.version)

    def limit(self) -> int:
        active = self.active()
        head_version = self.submitted[active[0]] if active else None
        return admission_bound(BoundedStalenessSchedulerConfig(max_head_offpolicyness=self.S),
                               self.N, self.P, self.version, head_version)

    def submit(self) -> bool:
        if self.in_flight() + 1 > self.limit():
            return False
        self.submitted[len(self.submitted)] = self.version
        return True

    def take(self) -> bool:
        if self.taken_unpublished:
            return False
        entries = [QueueEntry(i, str(i), i in self.complete, 0.0, 1.0 if i in self.expired else None)
                   for i in self.active()]
        decision = select(entries, self.P, None, 10.0, "drop", min_groups=self.P)
        self.dropped.update(int(g) for g in decision.timed_out)
        for g in decision.take:
            self.consumed[int(g)] = self.version
            self.ages.append(self.version - self.submitted[int(g)])
        self.taken_unpublished = bool(decision.take)
        return bool(decision.take)

    def publish(self) -> None:
        if self.taken_unpublished:
            self.version += 1
            self.taken_unpublished = False


@settings(max_examples=400, deadline=None)
@given(S=st.integers(0, 3), P=st.integers(1, 4), N=st.integers(1, 40), data=st.data())
def test_the_staleness_cap_bounds_every_samples_age(S, P, N, data):
    """bounded_staleness: whatever finishes when (a straggler left unfinished for ever, heads timing
    out), no group is trained more than S versions after it was submitted; and the cap never
    deadlocks: with every active group finished and too few to take, one more may be submitted."""
    q = CappedQueue(S, P, max(N, P))
    actions = st.sampled_from(["submit", "submit", "finish", "finish", "take", "publish", "expire"])
    for _ in range(data.draw(st.integers(0, 150))):
        action = data.draw(actions)
        if action == "submit":
            q.submit()
        elif action == "finish":
            pending = [i for i in q.active() if i not in q.complete]
            if pending:
                q.complete.add(data.draw(st.sampled_from(pending)))
        elif action == "take":
            q.take()
        elif action == "publish":
            q.publish()
        elif q.active():  # the head is stuck past its budget
            q.expired.add(q.active()[0])
        assert all(age <= S for age in q.ages), (q.ages, q.submitted, q.consumed)
        if not q.taken_unpublished and len(q.active()) < P and all(i in q.complete for i in q.active()):
            assert q.in_flight() + 1 <= q.limit(), "admission is closed with nothing the trainer could take"
    assert all(0 <= age <= S for age in q.ages)


def test_staleness_limit_examples():
    assert staleness_limit(2, 4, version=5, head_version=None) == 12  # (S + 1) · P: nothing active
    assert staleness_limit(2, 4, version=5, head_version=5) == 12
    assert staleness_limit(2, 4, version=5, head_version=3) == 4  # the head is S versions old: one step's worth
    assert staleness_limit(2, 4, version=5, head_version=2) == 0  # cannot happen under the cap; closed
    assert staleness_limit(0, 3, version=0, head_version=None) == 3  # S = 0: synchronous, one step at a time
    assert admission_bound(BoundedStalenessSchedulerConfig(max_head_offpolicyness=2), 5, 4, 5, 5) == 5  # N binds
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        BoundedStalenessSchedulerConfig(max_head_offpolicyness=-1)


# ---- timeouts: only the real head ---------------------------------------------------------------------------


def test_a_discarded_take_times_out_no_group_behind_the_head():
    """g1 would be the head only after g0 is taken; min_groups=2 discards that take, so g1 is not the
    head and must not time out (it used to: timed_out=['g1'] with g0 still unconsumed)."""
    queue = [QueueEntry(0, "g0", True, 0, 10), QueueEntry(1, "g1", False, 0, 10), QueueEntry(2, "g2", False, 45, 10)]
    decision = select(queue, max_groups=2, window=1, now=50, on_timeout="drop", min_groups=2)
    assert decision.take == [] and decision.timed_out == []
    # with the take allowed, g1 does become the head, and times out
    assert select(queue, max_groups=2, window=1, now=50, on_timeout="drop", min_groups=1) == select(queue, 2, 1, 50, "drop")
    assert select(queue, 2, 1, 50, "drop").timed_out == ["g1"]


def test_a_discarded_take_keeps_the_real_heads_timeouts():
    """The real head's timeout stands when the take is discarded (and with "drop" so do those of the
    heads it uncovers); the timeouts after the first hypothetical take do not."""
    drop = [QueueEntry(0, "g0", False, 0, 10), QueueEntry(1, "g1", False, 0, 10), QueueEntry(2, "g2", True, 0, None),
            QueueEntry(3, "g3", False, 0, 10), QueueEntry(4, "g4", False, 49, 10)]
    assert select(drop, 3, 1, 50, "drop", min_groups=3) == Decision(take=[], timed_out=["g0", "g1"], head_before=0)
    assert select(drop, 3, 1, 50, "drop").timed_out == ["g0", "g1", "g3"]
    train = [QueueEntry(0, "g0", False, 0, 10), QueueEntry(1, "g1", False, 0, 10), QueueEntry(2, "g2", False, 49, 10)]
    assert select(train, 3, 1, 50, "train", min_groups=3).timed_out == ["g0"]
    assert select(train, 3, 1, 50, "train").take == ["g0", "g1"]


def replay(active: list[QueueEntry], take: list[str], timed_out: list[str], window: int | None, now: float,
           on_timeout: str) -> tuple[list[QueueEntry], set[str]]:
    """Apply a decision's timeouts and takes in order to the queue, checking that each timeout hits
    the head as it stands then and each take obeys the window; returns the queue left and the groups
    timed out under "train" (closed, so complete)."""
    queue = sorted(active, key=lambda e: e.queue_index)
    closed: set[str] = set()
    takes, outs = list(take), list(timed_out)
    while takes or outs:
        head = queue[0] if queue else None
        if outs and head is not None and head.group_id == outs[0]:
            assert not head.complete and head.expired(now), f"{head.group_id} timed out without being stuck"
            outs.pop(0)
            if on_timeout == "drop":
                queue.pop(0)
            else:
                closed.add(head.group_id)
            continue
        assert takes, f"{outs[0]} timed out while {head.group_id if head else None} was the head"
        assert head is not None
        assert head.complete or head.group_id in closed or not head.expired(now), "a stuck head was passed over"
        gid = takes.pop(0)
        [entry] = [e for e in queue if e.group_id == gid]
        assert entry.complete or gid in closed, f"{gid} is unfinished"
        if window is not None:
            assert entry.queue_index < head.queue_index + window, f"{gid} is outside the window of {head.group_id}"
        queue.remove(entry)
    return queue, closed


@st.composite
def queues(draw):
    n = draw(st.integers(0, 9))
    indices = sorted(draw(st.sets(st.integers(0, 20), min_size=n, max_size=n)))  # gaps: groups consumed earlier
    return [
        QueueEntry(i, f"g{i}", draw(st.booleans()), draw(st.floats(0, 100)), draw(st.one_of(st.none(), st.floats(0, 60))))
        for i in indices
    ]


@settings(max_examples=1000, deadline=None)
@given(active=queues(), max_groups=st.integers(1, 5), window=st.one_of(st.none(), st.integers(1, 6)),
       now=st.floats(0, 200), on_timeout=st.sampled_from(["drop", "train"]), min_groups=st.integers(1, 5))
def test_only_the_head_times_out(active, max_groups, window, now, on_timeout, min_groups):
    """Every timed-out group is the head of the queue as it stands after the decision's takes before
    it; a take discarded for min_groups times out only the real head (and under "drop" the heads
    that dropping it uncovers); no stuck head is left standing before a take or after no take."""
    decision = select(active, max_groups, window, now, on_timeout, min_groups)
    queue, closed = replay(active, decision.take, decision.timed_out, window, now, on_timeout)
    assert len(decision.timed_out) == len(set(decision.timed_out))
    assert decision.take == [] or min_groups <= len(decision.take) <= max_groups
    if not decision.take and queue:  # nothing taken: the head left is not one that should have timed out
        head = queue[0]
        assert head.complete or head.group_id in closed or not head.expired(now)
    # the same decision as taking without min_groups, but all or nothing, and only the timeouts before the first take
    free = select(active, max_groups, window, now, on_timeout)
    if len(free.take) >= min_groups:
        assert decision == free
    else:
        assert decision.take == [] and free.timed_out[: len(decision.timed_out)] == decision.timed_out
        replay(active, [], free.timed_out[: len(decision.timed_out)], window, now, on_timeout)


def test_the_pool_applies_a_discarded_take_without_timing_out_the_next_group(pool_spec):
    """DataPool.take_batch on the regression case: nothing consumed, nothing timed out."""
    from forge_cli.pool.types import GroupStatus, TrajectoryStatus
    from tests.conftest import open_spec

    now = [1000.0]
    pool = open_spec(pool_spec, clock=lambda: now[0])
    try:
        g0 = pool.submit_group("t0", 1, "react", timeout_s=10)
        g1 = pool.submit_group("t1", 1, "react", timeout_s=10)
        pool.start_trajectory(g0.trajectories[0].id)
        pool.finish_trajectory(g0.trajectories[0].id, rewards={"outcome": 1.0})
        now[0] += 45
        g2 = pool.submit_group("t2", 1, "react", timeout_s=10)
        now[0] += 5
        batch = pool.take_batch(2, 0, window=1, on_timeout="drop", min_groups=2)
        assert batch.groups == [] and batch.timed_out == []
        for g in (g0, g1, g2):
            stored = pool.group(g.id)
            assert stored.status is GroupStatus.ACTIVE and not stored.timed_out
        assert pool.group(g1.id).trajectories[0].status is TrajectoryStatus.QUEUED
        batch = pool.take_batch(1, 0, window=1, on_timeout="drop", min_groups=1)  # now g1 is the head once g0 goes
        assert [g.id for g in batch.groups] == [g0.id] and batch.timed_out == []
        batch = pool.take_batch(1, 0, window=1, on_timeout="drop", min_groups=1)
        assert batch.timed_out == [g1.id] and batch.groups == []  # g2 is not done
    finally:
        pool.close()


def test_the_staleness_cap_on_a_real_pool(pool_spec):
    """bounded_staleness (S = 1, P = 2) through DataPool's own in-flight count, on SQLite and PostgreSQL:
    (S + 1)·P groups before any step; a step's groups count until its version is published; then a head
    that is S versions old lets in only one step's worth."""
    from forge_cli.config import load_config
    from forge_cli.pool.store import PoolFull
    from forge_cli.pool.scheduler import Scheduler
    from tests.conftest import open_spec

    config = load_config(env={}, overrides={"pool.scheduler.type": "bounded_staleness",
                                            "pool.scheduler.max_head_offpolicyness": 1, "pool.max_active_groups": 16})
    s = Scheduler.from_config(config.pool, groups_per_step=2)
    pool = open_spec(pool_spec)
    submitted_at: dict[int, int] = {}

    def submit(version: int):
        head = s.head(pool)
        group = s.submit(pool, "t", 1, "react", version=version,
                         head_version=None if head is None else submitted_at[head])
        submitted_at[group.queue_index] = version
        return group

    def finish(group):
        pool.start_trajectory(group.trajectories[0].id)
        pool.finish_trajectory(group.trajectories[0].id, rewards={"outcome": 1.0})

    try:
        groups = [submit(0) for _ in range(4)]
        with pytest.raises(PoolFull):
            submit(0)
        for g in groups[:2]:
            finish(g)
        assert [g.queue_index for g in s.take(pool, 0).groups] == [0, 1]
        with pytest.raises(PoolFull):  # taken at version 0, not yet published: still in flight
            submit(0)
        pool.publish_version(1)
        # the head (index 2) was submitted at version 0, now 1 = S versions old: in flight ≤ (S + 1 − 1)·P = 2
        assert s.head(pool) == 2
        with pytest.raises(PoolFull):
            submit(1)
        for g in groups[2:]:
            finish(g)
        assert [g.queue_index for g in s.take(pool, 1).groups] == [2, 3]
        pool.publish_version(2)
        assert s.head(pool) is None
        assert [submit(2).queue_index for _ in range(4)] == [4, 5, 6, 7]  # nothing active: (S + 1)·P again
        with pytest.raises(PoolFull):
            submit(2)
    finally:
        pool.close()


# ---- the staleness cap on takes, with N groups in flight (select_capped) --------------------------------------


def test_select_capped_examples():
    """Earliest deadline first, then the oldest complete; a due group that is unfinished makes the step
    wait, and times out past its budget; a cap that cannot hold with what is in flight raises."""
    def e(i: int, done: bool, v: int, timeout: float | None = None) -> QueueEntry:
        return QueueEntry(i, f"g{i}", done, 0.0, timeout, v)

    # nothing due yet: greedy (oldest complete first), all or nothing
    queue = [e(0, False, 0), e(1, True, 1), e(2, True, 1), e(3, False, 2), e(4, True, 2)]
    assert select_capped(queue, 2, version=2, cap=3, now=0).take == ["g1", "g2"]
    assert select_capped(queue, 4, version=2, cap=3, now=0).take == []
    # g0 (version 0) is due at step 3 = 0 + cap: the step waits for it, even with two others complete
    assert select_capped(queue, 2, version=3, cap=3, now=0) == Decision(take=[], timed_out=[], head_before=0)
    done = [e(0, True, 0)] + queue[1:]
    assert select_capped(done, 2, version=3, cap=3, now=0).take == ["g0", "g1"]
    # due by the next step too: 3 groups due by step 4 and 2 a step, so this step must take 1 of them
    queue = [e(0, False, 0), e(1, True, 1), e(2, False, 1), e(3, True, 2), e(4, True, 2)]
    assert select_capped(queue, 2, version=3, cap=3, now=0).take == []  # g0 is due now
    queue[0] = e(0, True, 0)
    assert select_capped(queue, 2, version=3, cap=3, now=0).take == ["g0", "g1"]
    assert select_capped(queue, 2, version=2, cap=3, now=0).take == ["g0", "g1"]  # nothing is due: greedy
    # a due group past its budget: dropped, or closed and taken; the step goes on without waiting
    stuck = [e(0, True, 0), e(1, False, 0, timeout=5.0), e(2, True, 1), e(3, True, 1)]
    assert select_capped(stuck, 2, version=3, cap=3, now=4) == Decision(take=[], timed_out=[], head_before=0)
    assert select_capped(stuck, 2, version=3, cap=3, now=6) == Decision(take=["g0", "g2"], timed_out=["g1"], head_before=0)
    assert select_capped(stuck, 2, version=3, cap=3, now=6, on_timeout="train").take == ["g0", "g1"]
    # an unfinished head past its budget times out as in select, due or not
    fresh = [e(0, False, 5, timeout=1.0), e(1, True, 5), e(2, True, 5)]
    assert select_capped(fresh, 2, 5, 3, now=2) == Decision(take=["g1", "g2"], timed_out=["g0"], head_before=0)
    # a cap far above every age is greedy with min_groups
    mixed = [e(i, i % 3 != 0, i // 2) for i in range(9)]
    assert select_capped(mixed, 4, 4, 100, now=0).take == select(mixed, 4, None, 0, min_groups=4).take
    # 3 groups due at once, 2 a step (N > (S + 1)·P, or a resumed run's backlog): the earliest deadlines first,
    # still waiting for an unfinished due one rather than overtaking it
    backlog = [e(0, True, 1), e(1, True, 0), e(2, True, 0), e(3, True, 1)]
    assert select_capped(backlog, 2, version=1, cap=1, now=0).take == ["g1", "g2"]
    backlog[2] = e(2, False, 0)
    assert select_capped(backlog, 2, version=1, cap=1, now=0).take == []
    with pytest.raises(ValueError, match="submission version"):
        select_capped([QueueEntry(0, "g0", True, 0.0)], 1, 0, 1, now=0)


class DeadlineQueue:
    """select_capped driven by an adversary (hypothesis) that picks which group finishes, which run out
    of time, when the rollout side submits (up to N in flight, the pool's count: active, or consumed at
    a version not yet published) and when the trainer takes and publishes. Each group is stamped with
    the version it was submitted at."""

    def __init__(self, S: int, P: int, N: int, on_timeout: str) -> None:
        self.S, self.P, self.N, self.on_timeout = S, P, N, on_timeout
        self.version = 0
        self.taken_unpublished = False
        self.submitted: dict[int, int] = {}
        self.complete: set[int] = set()
        self.expired: set[int] = set()
        self.consumed: dict[int, int] = {}
        self.dropped: set[int] = set()
        self.ages: list[int] = []

    def active(self) -> list[int]:
        return sorted(i for i in self.submitted if i not in self.consumed and i not in self.dropped)

    def in_flight(self) -> int:
        return len(self.active()) + sum(1 for step in self.consumed.values() if step >= self.version)

    def submit(self) -> None:
        if self.in_flight() < self.N:
            self.submitted[len(self.submitted)] = self.version

    def take(self) -> None:
        if self.taken_unpublished:
            return
        entries = [QueueEntry(i, str(i), i in self.complete, 0.0, 1.0 if i in self.expired else None, self.submitted[i])
                   for i in self.active()]
        decision = select_capped(entries, self.P, self.version, self.S, 10.0, self.on_timeout)
        assert len(decision.take) in (0, self.P) and len(set(decision.take)) == len(decision.take)
        for g in decision.timed_out:
            assert int(g) in self.expired and int(g) not in self.complete
            (self.dropped if self.on_timeout == "drop" else self.complete).add(int(g))
        for g in decision.take:
            assert int(g) in self.complete and int(g) in self.active(), f"took {g}, unfinished or gone"
            self.consumed[int(g)] = self.version
            self.ages.append(self.version - self.submitted[int(g)])
        self.taken_unpublished = bool(decision.take)

    def publish(self) -> None:
        if self.taken_unpublished:
            self.version += 1
            self.taken_unpublished = False


@settings(max_examples=400, deadline=None)
@given(S=st.integers(0, 4), P=st.integers(1, 4), data=st.data(), on_timeout=st.sampled_from(["drop", "train"]))
def test_the_cap_on_takes_bounds_every_samples_age_with_n_in_flight(S, P, data, on_timeout):
    """select_capped with any P ≤ N ≤ (S + 1)·P in flight: whatever finishes when (stragglers left unfinished
    for ever, groups running out of time), no group is trained more than S versions after it was
    submitted, no step is asked for more than it can take, and nothing deadlocks: with every active group
    finished the trainer can take P of them, or the rollout side may submit more."""
    q = DeadlineQueue(S, P, data.draw(st.integers(P, (S + 1) * P)), on_timeout)
    actions = st.sampled_from(["submit", "submit", "finish", "finish newest", "take", "publish", "expire"])
    for _ in range(data.draw(st.integers(0, 200))):
        action = data.draw(actions)
        pending = [i for i in q.active() if i not in q.complete]
        if action == "submit":
            q.submit()
        elif action == "finish" and pending:
            q.complete.add(data.draw(st.sampled_from(pending)))
        elif action == "finish newest" and pending:  # the fast ones overtake the old stragglers
            q.complete.add(pending[-1])
        elif action == "take":
            q.take()
        elif action == "publish":
            q.publish()
        elif action == "expire" and pending:  # some unfinished group runs out of time
            q.expired.add(data.draw(st.sampled_from(pending)))
        assert all(age <= S for age in q.ages), (q.ages, q.submitted, q.consumed)
        if not q.taken_unpublished and all(i in q.complete for i in q.active()):
            if len(q.active()) >= P:
                q.take()
                assert q.taken_unpublished, "every active group is finished and the trainer could not take"
            else:
                assert q.in_flight() < q.N, "admission is closed with nothing the trainer could take"
    # every group due by now was taken or timed out: none is older than S and still waiting
    if not q.taken_unpublished:
        q.take()
    assert all(q.version - q.submitted[i] <= S for i in q.active())

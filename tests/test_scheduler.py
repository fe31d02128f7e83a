"""The window rule (DESIGN.md §4), as properties over random completion orders (hypothesis)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_cli.pool.scheduler import QueueEntry, select, window_size


def test_window_size():
    assert window_size("fifo", 0.3, 16) == 1
    assert window_size("greedy", 0.3, 16) is None
    assert window_size("windowed_fifo", 0.3, 16) == 5  # ceil(4.8)
    assert window_size("windowed_fifo", 0.01, 16) == 1
    with pytest.raises(ValueError):
        window_size("lifo", 0.3, 16)


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

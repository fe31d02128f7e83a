"""Group commit (forge_cli/pool/group_commit.py, DataPool.append_completion): units queued while a
commit is in progress share the next one; a unit that raises is undone alone; a failed commit fails
its whole batch; what a call returned is durable (a SIGKILL under threaded load loses none of it).
And the checks of a completion's arrays, done in C, give the plain checks' verdicts."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import threading
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_cli.errors import ForgeError
from forge_cli.pool.checks import INT32_MAX, check_logprobs, pack_ids
from forge_cli.pool.schema import pack_floats, pack_ints
from forge_cli.pool.group_commit import GroupCommit
from forge_cli.pool.types import NewCompletion
from tests.conftest import ROOT, open_spec
from tests.pool_workers import digest, kill_after, reopen_intact


def _db(tmp_path):
    conn = sqlite3.connect(tmp_path / "t.sqlite", isolation_level=None, check_same_thread=False)
    conn.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    return conn


def _transaction(conn, gate: threading.Event | None = None, entered: threading.Event | None = None):
    """A write transaction on ``conn``; the first one waits on ``gate`` after beginning (so that others queue)."""
    lock = threading.Lock()
    first = [True]

    @contextmanager
    def tx():
        with lock:
            cur = conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            if first[0] and gate is not None:
                first[0] = False
                entered.set()
                gate.wait()
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise

    return tx


def _insert(x: int, fail: bool = False):
    def work(cur):
        cur.execute("INSERT INTO t (x) VALUES (?)", (x,))
        if fail:
            raise ValueError(f"unit {x} fails")
        return x
    return work


def _run_held(gc: GroupCommit, gate, entered, units) -> dict:
    """The first unit starts a commit and holds it; the others queue behind it; then the commit goes on."""
    results: dict = {}

    def call(key, work):
        try:
            results[key] = gc.run(work)
        except Exception as exc:  # noqa: BLE001 — recorded for the test to compare
            results[key] = exc

    first = threading.Thread(target=call, args=("first", _insert(-1)))
    first.start()
    assert entered.wait(30)
    others = [threading.Thread(target=call, args=(k, w)) for k, w in units]
    for t in others:
        t.start()
    while gc.queued < len(units):  # observable: every other unit waits for the next commit
        threading.Event().wait(0.001)
    gate.set()
    for t in [first, *others]:
        t.join(30)
    return results


def test_units_queued_during_a_commit_share_the_next_commit(tmp_path):
    conn = _db(tmp_path)
    gate, entered = threading.Event(), threading.Event()
    gc = GroupCommit(_transaction(conn, gate, entered))
    results = _run_held(gc, gate, entered, [(i, _insert(i)) for i in range(12)])
    assert results == {"first": -1, **{i: i for i in range(12)}}
    assert (gc.commits, gc.units) == (2, 13)
    assert sorted(x for (x,) in conn.execute("SELECT x FROM t")) == list(range(-1, 12))


def test_a_failing_unit_is_undone_alone(tmp_path):
    conn = _db(tmp_path)
    gate, entered = threading.Event(), threading.Event()
    gc = GroupCommit(_transaction(conn, gate, entered))
    results = _run_held(gc, gate, entered, [(i, _insert(i, fail=i in (2, 5))) for i in range(8)])
    assert isinstance(results[2], ValueError) and isinstance(results[5], ValueError)
    assert {k: v for k, v in results.items() if k not in (2, 5)} == {"first": -1, **{i: i for i in (0, 1, 3, 4, 6, 7)}}
    assert sorted(x for (x,) in conn.execute("SELECT x FROM t")) == [-1, 0, 1, 3, 4, 6, 7]
    assert gc.commits == 2


def test_a_failed_commit_fails_every_unit_of_its_batch(tmp_path):
    conn = _db(tmp_path)
    gate, entered = threading.Event(), threading.Event()
    inner = _transaction(conn, gate, entered)
    calls = [0]

    @contextmanager
    def tx():
        calls[0] += 1
        with inner() as cur:
            yield cur
            if calls[0] == 2:  # the batched commit: the disk says no
                raise OSError("disk I/O error")

    gc = GroupCommit(tx)
    results = _run_held(gc, gate, entered, [(i, _insert(i)) for i in range(5)])
    assert results["first"] == -1
    assert all(isinstance(results[i], OSError) for i in range(5))
    assert [x for (x,) in conn.execute("SELECT x FROM t")] == [-1]


class Interrupted(BaseException):
    pass


def _interrupt_main_when(ready, handler):
    """Send the main thread SIGUSR1 once ``ready()``; ``handler`` (run in the main thread) raises."""
    main = threading.main_thread().ident

    def send():
        while not ready():  # observable: the main thread's unit waits in the queue
            threading.Event().wait(0.001)
        signal.pthread_kill(main, signal.SIGUSR1)

    return threading.Thread(target=send), signal.signal(signal.SIGUSR1, handler)


@pytest.mark.parametrize("handed_the_lead", [False, True])
def test_a_caller_interrupted_while_it_waits_leaves_nobody_waiting_on_it(tmp_path, handed_the_lead):
    """A signal whose handler raises interrupts a caller waiting for its commit (the main thread, e.g. a
    second Ctrl-C). Its unit leaves the queue; had it just been handed the lead, the lead goes on to
    the next caller. Nothing hangs, and its unit is not written."""
    conn = _db(tmp_path)
    gate, entered = threading.Event(), threading.Event()
    gc = GroupCommit(_transaction(conn, gate, entered))
    results: dict = {}

    def call(key, work):
        results[key] = gc.run(work)

    first = threading.Thread(target=call, args=("first", _insert(-1)))
    first.start()
    assert entered.wait(30)
    behind = threading.Thread(target=call, args=("behind", _insert(2)))

    def handler(signum, frame):
        behind.start()  # queued after the main thread's unit
        while gc.queued < 2:
            threading.Event().wait(0.001)
        if handed_the_lead:  # the commit in progress ends and hands the lead to the main thread's unit
            gate.set()
            first.join(30)
        raise Interrupted

    sender, old = _interrupt_main_when(lambda: gc.queued >= 1, handler)
    sender.start()
    try:
        with pytest.raises(Interrupted):
            gc.run(_insert(1))
    finally:
        signal.signal(signal.SIGUSR1, old)
    sender.join(30)
    gate.set()
    for t in (first, behind):
        t.join(30)
        assert not t.is_alive()
    assert results == {"first": -1, "behind": 2} and gc.queued == 0
    assert gc.run(_insert(3)) == 3  # a lone caller commits at once: the lead was not left with anyone
    assert sorted(x for (x,) in conn.execute("SELECT x FROM t")) == [-1, 2, 3]


@pytest.mark.parametrize("seed", range(4))
def test_many_threads_store_exactly_what_returned(tmp_path, seed):
    """Random threads and failing units, no holding: the table is exactly the units that returned."""
    rng = random.Random(seed)
    conn = _db(tmp_path)
    gc = GroupCommit(_transaction(conn), max_batch=rng.choice([1, 3, 256]))
    n_threads, per_thread = rng.randrange(2, 12), rng.randrange(5, 40)
    plan = [[(t * 1000 + i, rng.random() < 0.2) for i in range(per_thread)] for t in range(n_threads)]
    returned, raised = [], []

    def worker(units):
        for x, fail in units:
            try:
                returned.append(gc.run(_insert(x, fail)))
            except ValueError:
                raised.append(x)

    threads = [threading.Thread(target=worker, args=(units,)) for units in plan]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    expected = sorted(x for units in plan for x, fail in units if not fail)
    assert sorted(returned) == expected
    assert sorted(raised) == sorted(x for units in plan for x, fail in units if fail)
    assert sorted(x for (x,) in conn.execute("SELECT x FROM t")) == expected
    assert gc.units == n_threads * per_thread and 1 <= gc.commits <= gc.units


def _completion(tid, rng, n=20):
    output = [rng.randrange(0, 5000) for _ in range(rng.randrange(1, 9))]
    return NewCompletion(tid, prompt_ids=[rng.randrange(0, 5000) for _ in range(n)], output_ids=output,
                         output_logprobs=[-rng.random() for _ in output], policy_version=0)


def test_concurrent_appends_keep_each_trajectorys_sequence(pool):
    group = pool.submit_group("gc", 8, "react")
    tids = [t.id for t in group.trajectories]
    for tid in tids[:7]:
        pool.start_trajectory(tid)
    pool.start_trajectory(tids[7])
    pool.finish_trajectory(tids[7], rewards={"outcome": 0.0})  # appends to it must fail, alone
    sent: dict = {tid: [] for tid in tids}
    rejected = []

    def writer(tid, seed):
        rng = random.Random(seed)
        for _ in range(15):
            c = _completion(tid, rng)
            try:
                got = pool.append_completion(c)
            except ForgeError as exc:
                rejected.append(str(exc))
                continue
            sent[tid].append((got.seq, c.prompt_ids, c.output_ids, got.output_logprobs))

    threads = [threading.Thread(target=writer, args=(tid, i)) for i, tid in enumerate(tids)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(rejected) == 15 and all("not running" in r for r in rejected)
    for tid in tids[:7]:
        stored = [(c.seq, c.prompt_ids, c.output_ids, c.output_logprobs) for c in pool.trajectory(tid).completions]
        assert stored == sent[tid] and [s[0] for s in stored] == list(range(15))
    assert pool.trajectory(tids[7]).completions == []


def test_append_completions_is_all_or_nothing(pool):
    group = pool.submit_group("gc", 2, "react")
    a, b = (t.id for t in group.trajectories)
    pool.start_trajectory(a)
    rng = random.Random(0)
    with pytest.raises(ForgeError, match="not running"):  # b was never started: a's row goes too
        pool.append_completions([_completion(a, rng), _completion(b, rng)])
    bad = NewCompletion(a, prompt_ids=[1, True], output_ids=[2], output_logprobs=[-0.1], policy_version=0)
    with pytest.raises(ForgeError, match="list of integers"):
        pool.append_completions([_completion(a, rng), bad])
    assert pool.trajectory(a).completions == []
    two = pool.append_completions([_completion(a, rng), _completion(a, rng)])
    assert [c.seq for c in two] == [0, 1] == [c.seq for c in pool.trajectory(a).completions]


def test_threads_killed_mid_stream_lose_nothing_that_returned(pool_spec):
    pool = open_spec(pool_spec)
    tids = [t.id for t in pool.submit_group("crash", 8, "react").trajectories]
    pool.close()
    proc = subprocess.Popen([sys.executable, "-m", "tests.pool_workers", "crash-threads", json.dumps(pool_spec), json.dumps(tids)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    returned = kill_after(proc, 300)
    reopened = reopen_intact(pool_spec)
    for tid in tids:
        completions = reopened.trajectory(tid).completions
        assert [c.seq for c in completions] == list(range(len(completions)))
        stored = {(tid, c.seq): digest(c.prompt_ids, c.output_ids, c.output_logprobs) for c in completions}
        mine = {k: v for k, v in returned.items() if k[0] == tid}
        assert {k: stored.get(k) for k in mine} == mine
    reopened.close()


# ---- the checks of what is written, in C where they can: the plain Python checks' verdicts, exactly ----------

_ID = st.one_of(st.integers(0, INT32_MAX), st.integers(-2**40, 2**40), st.booleans(), st.floats(allow_nan=False), st.none())


@settings(max_examples=300, deadline=None)
@given(values=st.one_of(st.lists(st.integers(0, INT32_MAX), max_size=40), st.lists(_ID, max_size=40)))
def test_pack_ids_accepts_exactly_the_token_id_lists(values):
    plain_ok = all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= INT32_MAX for v in values)
    if plain_ok:
        assert pack_ids("ids", values) == pack_ints(values)
    else:
        with pytest.raises(ForgeError, match="ids (must be a list of integers|holds a token id outside)"):
            pack_ids("ids", values)


_LOGPROB = st.one_of(st.floats(max_value=0.0), st.floats(), st.integers(-5, 5), st.booleans(), st.just(float("nan")))


@settings(max_examples=300, deadline=None)
@given(values=st.one_of(st.lists(st.floats(max_value=0.0, allow_nan=False), max_size=30), st.lists(_LOGPROB, max_size=30)))
def test_check_logprobs_accepts_exactly_numbers_at_most_zero(values):
    plain_ok = all(isinstance(x, (int, float)) and not isinstance(x, bool) and x <= 0.0 for x in values)
    if plain_ok:
        assert check_logprobs(values, len(values)) == pack_floats(list(values))
    else:
        with pytest.raises(ForgeError, match="output_logprobs"):
            check_logprobs(values, len(values))
    with pytest.raises(ForgeError, match="one value per output id"):
        check_logprobs(values, len(values) + 1)

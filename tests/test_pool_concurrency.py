"""Many writer processes and a consuming reader, and a writer killed mid-stream — on both backends."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from forge_cli.pool.types import GroupStatus, NewCompletion
from tests.conftest import ROOT, open_spec
from tests.pool_workers import digest, kill_after, reopen_intact

pytestmark = pytest.mark.slow

WRITERS = 8
GROUPS, GROUP_SIZE, TURNS = 64, 4, 16  # 256 trajectories, 4,096 completions
WINDOW = 4


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.pool_workers", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_eight_writers_and_a_reader(pool_spec):
    pool = open_spec(pool_spec)
    groups = [pool.submit_group(f"task-{i}", GROUP_SIZE, "react") for i in range(GROUPS)]
    tids = [t.id for g in groups for t in g.trajectories]
    shares = [tids[w::WRITERS] for w in range(WRITERS)]
    procs = [_spawn("writer", json.dumps(pool_spec), json.dumps(share), str(TURNS), str(w)) for w, share in enumerate(shares)]

    # the reader consumes while the writers write, checking the window rule at every take
    taken_order: list[int] = []
    errors: list[str] = []
    writers_done = threading.Event()

    def reader() -> None:
        rpool = open_spec(pool_spec)
        consumed: set[int] = set()
        version = 0
        try:
            while len(consumed) < GROUPS:
                finished = writers_done.is_set()  # read before the take: a last take after the writers stop
                batch = rpool.take_batch(3, version, window=WINDOW)
                for g in batch.groups:
                    head = min(set(range(GROUPS)) - consumed)
                    if g.queue_index >= head + WINDOW:
                        errors.append(f"took {g.queue_index} with head {head}")
                    if g.queue_index in consumed:
                        errors.append(f"group {g.queue_index} yielded twice")
                    if not all(t.status.terminal for t in g.trajectories):
                        errors.append(f"group {g.queue_index} yielded unfinished")
                    consumed.add(g.queue_index)
                    taken_order.append(g.queue_index)
                version += 1 if batch.groups else 0
                if not batch.groups:
                    if finished:
                        break
                    writers_done.wait(0.02)  # poll the pool again soon, at once when the writers are done
        finally:
            rpool.close()

    thread = threading.Thread(target=reader)
    thread.start()
    outputs = [p.communicate(timeout=600) for p in procs]
    writers_done.set()
    thread.join(timeout=60)
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-2000:]
    assert not errors, errors[:5]
    assert sorted(taken_order) == list(range(GROUPS))

    # every returned write is there, exactly once, bit for bit
    returned = {}
    for out, _ in outputs:
        for line in out.splitlines():
            tid, seq, dig = line.split()
            assert (tid, int(seq)) not in returned
            returned[(tid, int(seq))] = dig
    assert len(returned) == len(tids) * TURNS
    stored = {}
    for g in pool.groups():
        assert g.status is GroupStatus.CONSUMED
        for t in g.trajectories:
            assert [c.seq for c in t.completions] == list(range(TURNS))
            for c in t.completions:
                stored[(t.id, c.seq)] = digest(c.prompt_ids, c.output_ids, c.output_logprobs)
    assert stored == returned
    stats = pool.stats()
    assert stats["completions"] == len(tids) * TURNS
    assert sum(stats["trajectories"].values()) == len(tids)
    pool.close()


def test_writer_killed_mid_stream_loses_nothing_that_returned(pool_spec):
    pool = open_spec(pool_spec)
    tid = pool.submit_group("crash", 1, "react").trajectories[0].id
    pool.close()
    proc = _spawn("crash-writer", json.dumps(pool_spec), tid)
    returned = {seq: dig for (_, seq), dig in kill_after(proc, 150).items()}
    # the pool opens cleanly and holds every write whose call had returned
    reopened = reopen_intact(pool_spec)
    completions = reopened.trajectory(tid).completions
    seqs = [c.seq for c in completions]
    assert seqs == list(range(len(seqs))) and len(seqs) >= len(returned)
    for c in completions:
        if c.seq in returned:
            assert digest(c.prompt_ids, c.output_ids, c.output_logprobs) == returned[c.seq]
    # and it keeps working: the next completion continues the sequence
    nxt = reopened.append_completion(NewCompletion(tid, prompt_ids=[1], output_ids=[2], output_logprobs=[-1.0], policy_version=0))
    assert nxt.seq == len(seqs)
    reopened.close()

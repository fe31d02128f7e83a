"""Processes that write to a pool, for the concurrency and crash tests.

    python -m tests.pool_workers writer SPEC_JSON TRAJECTORY_IDS_JSON TURNS SEED
    python -m tests.pool_workers crash-writer SPEC_JSON TRAJECTORY_ID
    python -m tests.pool_workers crash-threads SPEC_JSON TRAJECTORY_IDS_JSON
    python -m tests.pool_workers starter SPEC_JSON TRAJECTORY_IDS_JSON

The writers print one line per completion *after* append_completion returned:
``trajectory_id seq digest`` — what the parent may then demand to find in the pool. The starter
starts its trajectories, prints ``started`` and waits to be killed.
"""

from __future__ import annotations

import hashlib
import json
import random
import signal
import sys

from forge_cli.pool.store import DataPool
from forge_cli.pool.types import NewCompletion


def digest(prompt_ids, output_ids, logprobs) -> str:
    return hashlib.sha1(json.dumps([prompt_ids, output_ids, [round(x, 5) for x in logprobs]]).encode()).hexdigest()[:16]


def make_completion(rng: random.Random, prompt_len: int | None = None):
    prompt = [rng.randrange(0, 150_000) for _ in range(prompt_len or rng.randrange(20, 400))]
    output = [rng.randrange(0, 150_000) for _ in range(rng.randrange(1, 60))]
    logprobs = [-rng.random() * 8 for _ in output]
    return prompt, output, logprobs


def open_spec(spec):
    return DataPool.sqlite(spec[1]) if spec[0] == "sqlite" else DataPool.postgres(spec[1], spec[2])


def kill_after(proc, count: int) -> dict[tuple[str, int], str]:
    """Read a writer's lines until ``count`` calls have returned, then SIGKILL it: (trajectory, seq) → digest."""
    returned = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        tid, seq, dig = line.split()
        returned[(tid, int(seq))] = dig
        if len(returned) >= count:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    return returned


def reopen_intact(spec):
    """The pool opened again after a crash, its SQLite file checked for integrity."""
    pool = open_spec(spec)
    if spec[0] == "sqlite":
        assert pool._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    return pool


def writer(spec, trajectory_ids, turns: int, seed: int) -> None:
    rng = random.Random(seed)
    pool = open_spec(spec)
    for tid in trajectory_ids:
        pool.start_trajectory(tid)
        for _ in range(turns):
            prompt, output, lps = make_completion(rng)
            c = pool.append_completion(NewCompletion(tid, prompt_ids=prompt, output_ids=output, output_logprobs=lps,
                                                     policy_version=rng.randrange(0, 3)))
            print(tid, c.seq, digest(prompt, output, c.output_logprobs), flush=True)
        if rng.random() < 0.1:
            pool.fail_trajectory(tid, "simulated agent crash", rewards={"outcome": 0.0})
        else:
            pool.finish_trajectory(tid, rewards={"outcome": float(rng.random() < 0.5), "process": -0.1 * rng.randrange(3)})
    pool.close()


def crash_writer(spec, trajectory_id: str) -> None:
    rng = random.Random(7)
    pool = open_spec(spec)
    pool.start_trajectory(trajectory_id)
    while True:  # until SIGKILL
        prompt, output, lps = make_completion(rng, prompt_len=2000)
        c = pool.append_completion(NewCompletion(trajectory_id, prompt_ids=prompt, output_ids=output, output_logprobs=lps,
                                                 policy_version=0))
        print(trajectory_id, c.seq, digest(prompt, output, c.output_logprobs), flush=True)


def crash_threads(spec, trajectory_ids) -> None:
    """One thread per trajectory on one pool (as the gateway's worker threads are), appending until
    SIGKILL: their commits are shared (group commit); each line is printed once its call returned."""
    import threading

    pool = open_spec(spec)
    out = threading.Lock()

    def run(tid: str, seed: int) -> None:
        rng = random.Random(seed)
        pool.start_trajectory(tid)
        while True:
            prompt, output, lps = make_completion(rng, prompt_len=2000)
            c = pool.append_completion(NewCompletion(tid, prompt_ids=prompt, output_ids=output, output_logprobs=lps,
                                                     policy_version=0))
            with out:
                print(tid, c.seq, digest(prompt, output, c.output_logprobs), flush=True)

    for i, tid in enumerate(trajectory_ids):
        threading.Thread(target=run, args=(tid, i), daemon=True).start()
    signal.pause()


def starter(spec, trajectory_ids) -> None:
    pool = open_spec(spec)
    for tid in trajectory_ids:
        pool.start_trajectory(tid)
    print("started", flush=True)
    while True:  # until killed
        signal.pause()


if __name__ == "__main__":
    kind, spec = sys.argv[1], json.loads(sys.argv[2])
    if kind == "writer":
        writer(spec, json.loads(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif kind == "crash-writer":
        crash_writer(spec, sys.argv[3])
    elif kind == "crash-threads":
        crash_threads(spec, json.loads(sys.argv[3]))
    elif kind == "starter":
        starter(spec, json.loads(sys.argv[3]))
    else:
        sys.exit(f"unknown worker {kind}")

"""Data-pool ingest: completions/s written and read, SQLite vs PostgreSQL, with 8k-token prompts.

Each round writes ``--completions`` completions through ``DataPool.append_completion``, 8 turns a
trajectory as an agent makes them, in groups of 8 trajectories (an RL group: their first prompt, the
task, is the same; each group's another): a first prompt of 8,192 ids, then each prompt the one before,
its 256-id output and a 150-id tool result (8,192–11,000 ids; the pool stores each later prompt as
the call it extends plus its new ids); ``--unrelated`` also measures prompts of 8,192 ids each that
share nothing (all stored whole). One durable transaction each (SQLite WAL with
``synchronous=FULL``; PostgreSQL with its default synchronous commit) — first from one process,
then from ``--writers`` processes at once, then from ``--threads`` threads of one process on one pool,
as the gateway's worker threads record (their commits shared: group commit, so each call still
returns only once its row is durable; the process's CPU time over that span says whether one core's
Python bounds it); then reads every trajectory back. Storage is reported
as token-array bytes per token (packed int32/float32) and as the whole store's bytes per token,
against JSON text for the same ids.

PostgreSQL is a throwaway local server (Debian's binaries) unless ``--pg-url`` names one.

``--floor`` also measures what bounds any durable SQLite store of these rows here: the same rows,
packed in advance, into a bare table with the pool's settings, one a commit and as many a commit as
the threads' group commit made.

    python benchmarks/pool_ingest.py [--completions 400] [--writers 4] [--threads 16] [--rounds 3] [--unrelated]
                                     [--floor] [--out benchmarks/results/pool_ingest.json]

Writes benchmarks/results/pool_ingest.json (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import nullcontext
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from forge_cli.pool.store import DataPool
from forge_cli.pool.types import NewCompletion  # noqa: E402

PROMPT, OUTPUT, TOOL, TURNS, GROUP = 8192, 256, 150, 8, 8


def open_spec(spec):
    return DataPool.sqlite(spec[1]) if spec[0] == "sqlite" else DataPool.postgres(spec[1], spec[2])


def made(seed: int, positions: list[int], unrelated: bool = False, group: int = GROUP) -> list[list[tuple[list[int], list[int], list[float]]]]:
    """The TURNS calls — (prompt, output, logprobs) — of the trajectories at ``positions`` of the
    round's list, made before the clock starts (so that the figure is the pool's, not the random number
    generator's). As an agent sends them: the first prompt is PROMPT ids, the same for the ``group``
    trajectories of a group (their task: position // group) and another for each group; each later one
    the previous prompt and output and a TOOL-id tool result (the same Python ints: as the gateway hands
    them on). ``unrelated``: every prompt is PROMPT ids of its own, sharing nothing (the pool's worst case)."""
    def ids(rng: random.Random, n: int) -> list[int]:
        return [rng.randrange(0, 150_000) for _ in range(n)]

    tasks: dict[int, list[int]] = {}
    out = []
    for pos in positions:
        rng = random.Random(f"{seed}-{pos}")
        if unrelated:
            prompt = ids(rng, PROMPT)
        else:
            if pos // group not in tasks:
                tasks[pos // group] = ids(random.Random(f"{seed}-task-{pos // group}"), PROMPT)
            prompt = tasks[pos // group]
        calls = []
        for _ in range(TURNS):
            output = ids(rng, OUTPUT)
            calls.append((prompt, output, [-rng.random() for _ in range(OUTPUT)]))
            prompt = ids(rng, PROMPT) if unrelated else prompt + output + ids(rng, TOOL)
        out.append(calls)
    return out


def write(spec, trajectory_ids, positions, seed, unrelated=False, group=GROUP) -> tuple[int, float, float, float]:
    """(completions written, wall-clock start, end, this process's CPU seconds in between) — start
    after the pool is open."""
    inputs = made(seed, positions, unrelated, group)
    pool = open_spec(spec)
    start, cpu = time.time(), time.process_time()
    n = 0
    for tid, calls in zip(trajectory_ids, inputs):
        pool.start_trajectory(tid)
        for turn, (prompt, output, logprobs) in enumerate(calls):
            pool.append_completion(NewCompletion(tid, prompt_ids=prompt, output_ids=output,
                                                 output_logprobs=logprobs, policy_version=turn))
            n += 1
        pool.finish_trajectory(tid, rewards={"outcome": 1.0})
    end, cpu = time.time(), time.process_time() - cpu
    pool.close()
    return n, start, end, cpu


def write_threads(spec, trajectory_ids, threads: int, seed: int, unrelated: bool = False,
                  group: int = GROUP) -> tuple[int, float, float, float, float]:
    """(completions written, start, end, completions per commit, this process's CPU seconds in between):
    ``threads`` threads on one pool, a group's members spread over them (as a gateway's sessions run them
    at once)."""
    import threading

    pool = open_spec(spec)
    positions = list(range(len(trajectory_ids)))
    shares = [(trajectory_ids[t::threads], made(seed, positions[t::threads], unrelated, group)) for t in range(threads)]
    counts = [0] * threads

    def run(t: int) -> None:
        for tid, calls in zip(*shares[t]):
            pool.start_trajectory(tid)
            for turn, (prompt, output, logprobs) in enumerate(calls):
                pool.append_completion(NewCompletion(tid, prompt_ids=prompt, output_ids=output,
                                                     output_logprobs=logprobs, policy_version=turn))
                counts[t] += 1
            pool.finish_trajectory(tid, rewards={"outcome": 1.0})

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    group_commit = getattr(pool, "_group", None)  # a Forge before group commit: one commit a call
    commits0, units0 = (group_commit.commits, group_commit.units) if group_commit else (0, 0)
    start, cpu = time.time(), time.process_time()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    end, cpu = time.time(), time.process_time() - cpu
    per_commit = ((group_commit.units - units0) / max(group_commit.commits - commits0, 1)) if group_commit else 1.0
    pool.close()
    return sum(counts), start, end, per_commit, cpu


def sqlite_floor(path: Path, rows: int, per_commit: int) -> dict:
    """What any durable SQLite store of these rows costs here: ``rows`` rows of a completion's size (its
    prompt, output and logprobs already packed, a small JSON) into a bare table with the pool's
    settings (WAL, ``synchronous=FULL``), ``per_commit`` rows a transaction; rows/s and CPU ms a row."""
    import os
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE completions (id TEXT PRIMARY KEY, prompt BLOB, output BLOB, logprobs BLOB, meta TEXT)")
    blobs = [(os.urandom(4 * PROMPT), os.urandom(4 * OUTPUT), os.urandom(4 * OUTPUT)) for _ in range(8)]
    meta = json.dumps({"sampling": {"temperature": 1.0}, "finish_reason": "stop", "policy_version": 0})
    start, cpu = time.perf_counter(), time.process_time()
    for first in range(0, rows, per_commit):
        conn.execute("BEGIN")
        for i in range(first, min(first + per_commit, rows)):
            conn.execute("INSERT INTO completions VALUES (?, ?, ?, ?, ?)", (uuid.uuid4().hex, *blobs[i % 8], meta))
        conn.execute("COMMIT")
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    conn.close()
    return {"rows_per_commit": per_commit, "rows_per_s": rows / wall, "cpu_ms_per_row": 1000 * cpu / rows}


def store_bytes(pool: DataPool, spec) -> int:
    if spec[0] == "sqlite":
        return sum(p.stat().st_size for p in Path(spec[1]).parent.glob(Path(spec[1]).name + "*"))
    cur = pool._conn.cursor()
    cur.execute("SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind = 'r'", (spec[2],))
    size = cur.fetchone()[0]
    pool._conn.commit()
    return int(size)


def one_round(spec, completions: int, writers: int, threads: int, unrelated: bool = False, group: int = GROUP) -> dict:
    pool = open_spec(spec)
    n_traj = max(writers, threads, completions // TURNS)
    n_groups = -(-n_traj // group)
    tids = [[t.id for g in (pool.submit_group(f"task-{part}-{i}", group, "bench") for i in range(n_groups))
             for t in g.trajectories][:n_traj] for part in range(3)]
    # one writer
    n1, start, end, cpu = write(spec, tids[0], list(range(n_traj)), 0, unrelated, group)
    single = n1 / (end - start)
    # several threads of one process, one pool
    nt, start, end, per_commit, threads_cpu = write_threads(spec, tids[2], threads, 2, unrelated, group)
    threaded = nt / (end - start)
    # several writer processes at once (each its share of the groups' members)
    positions = list(range(n_traj))
    ctx = mp.get_context("spawn")
    with ctx.Pool(writers) as workers:
        done = workers.starmap(write, [(spec, tids[1][w::writers], positions[w::writers], 1, unrelated, group)
                                       for w in range(writers)])
    # aggregate rate over the span in which the writers ran (process start-up excluded)
    parallel = sum(d[0] for d in done) / (max(d[2] for d in done) - min(d[1] for d in done))
    tids = [tid for part in tids for tid in part]
    # read everything back
    t0 = time.perf_counter()
    read = sum(len(pool.trajectory(tid).completions) for tid in tids)
    read_rate = read / (time.perf_counter() - t0)
    stats = pool.stats()
    tokens = stats["tokens"]["prompt"] + stats["tokens"]["output"]
    total = store_bytes(pool, spec)
    pool.close()
    return {
        "write_1": single,
        "cpu_ms_per_completion_1": 1000 * cpu / n1,
        f"write_{writers}": parallel,
        f"write_{threads}_threads": threaded,
        "completions_per_commit": per_commit,
        f"cpu_ms_per_completion_{threads}_threads": 1000 * threads_cpu / nt,
        f"cores_{threads}_threads": threads_cpu / (end - start),  # the process's CPU over the wall time: ~1 is one core's Python
        "read": read_rate,
        "token_bytes_per_token": stats["bytes_per_token"],
        "store_bytes_per_token": total / tokens,
        "completions": read,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--completions", type=int, default=400)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pg-url", default=None)
    parser.add_argument("--unrelated", action="store_true", help=(
        "also measure prompts that share nothing (each its own 8,192 ids: the pool stores every one whole)"))
    parser.add_argument("--out", default=str(HERE / "results" / "pool_ingest.json"))
    parser.add_argument("--floor", action="store_true", help=(
        "also measure the floor of any durable SQLite store here: the same rows, packed in advance, into a bare "
        "table (1 row a commit, as the single writer; and as many a commit as the threads' group commit made)"))
    args = parser.parse_args()

    rng = random.Random(0)
    ids = [rng.randrange(0, 150_000) for _ in range(PROMPT)]
    json_bytes = len(json.dumps(ids)) / len(ids)

    if args.pg_url:
        pg = nullcontext(args.pg_url)
    else:
        from forge_cli.pool.local_pg import throwaway_postgres

        pg = throwaway_postgres()
    layouts = ["agent", "unrelated"] if args.unrelated else ["agent"]
    results: dict[tuple[str, str], list[dict]] = {(b, lay): [] for lay in layouts for b in ("sqlite", "postgresql")}
    floors: dict[int, list[dict]] = {}
    with pg as url, tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):  # interleave the backends and layouts so noise hits all alike
            for layout in layouts:
                unrelated = layout == "unrelated"
                results["sqlite", layout].append(one_round(("sqlite", f"{tmp}/pool-{r}-{layout}.sqlite"), args.completions,
                                                           args.writers, args.threads, unrelated))
                results["postgresql", layout].append(one_round(("postgres", url, f"bench_{uuid.uuid4().hex[:8]}"),
                                                               args.completions, args.writers, args.threads, unrelated))
            if args.floor:
                grouped = max(1, round(results["sqlite", layouts[-1]][-1]["completions_per_commit"]))
                for per_commit in sorted({1, grouped}):
                    floors.setdefault(per_commit, []).append(sqlite_floor(Path(tmp) / f"floor-{r}-{per_commit}.sqlite",
                                                                          args.completions, per_commit))
    rows = []
    for (backend, layout), runs in results.items():
        med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
        rows.append({"backend": backend, "prompts": layout, **{k: round(v, 2) for k, v in med.items()}})
    w, t = f"write_{args.writers}", f"write_{args.threads}_threads"
    print(f"{PROMPT}-token first prompts (agent: each later one the last prompt + its {OUTPUT}-token output + a "
          f"{TOOL}-token tool result; unrelated: {PROMPT} ids of its own), {TURNS} turns a trajectory, "
          f"{args.completions} completions per round, median of {args.rounds} rounds; "
          f"JSON text would take {json_bytes:.2f} bytes/token")
    print(f"{'backend':<12}{'prompts':<11}{'write/s (1 proc)':>17}{f'write/s ({args.writers} procs)':>18}"
          f"{f'write/s ({args.threads} threads)':>22}{'per commit':>11}{'read/s':>9}{'token B/tok':>12}{'store B/tok':>12}")
    for row in rows:
        print(f"{row['backend']:<12}{row['prompts']:<11}{row['write_1']:>17.1f}{row[w]:>18.1f}{row[t]:>22.1f}"
              f"{row['completions_per_commit']:>11.1f}{row['read']:>9.1f}{row['token_bytes_per_token']:>12.2f}"
              f"{row['store_bytes_per_token']:>12.2f}")
    floor_rows = [{"rows_per_commit": k, "rows_per_s": round(statistics.median(f["rows_per_s"] for f in v), 1),
                   "cpu_ms_per_row": round(statistics.median(f["cpu_ms_per_row"] for f in v), 3)} for k, v in sorted(floors.items())]
    for row in rows:
        print(f"{row['backend']}, {row['prompts']} prompts: one writer's CPU {row['cpu_ms_per_completion_1']:.3f} ms a completion; "
              f"{args.threads} threads' {row[f'cpu_ms_per_completion_{args.threads}_threads']:.3f} ms a completion, "
              f"{row[f'cores_{args.threads}_threads']:.2f} cores busy")
    for f in floor_rows:
        print(f"floor (bare SQLite table, rows packed in advance), {f['rows_per_commit']} a commit: "
              f"{f['rows_per_s']:.1f} rows/s, CPU {f['cpu_ms_per_row']:.3f} ms a row")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "prompt_tokens": PROMPT, "output_tokens": OUTPUT,
                               "tool_tokens": TOOL, "turns": TURNS, "json_text_bytes_per_token": round(json_bytes, 2),
                               "rows": rows, "sqlite_floor": floor_rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

"""The schedulers end to end: the whole `forge train` loop on a mixed-difficulty suite whose
trajectories have very different lengths, once per scheduler, side by side.

The suite is ``kv-search`` (1-4 hops, uniformly; a h-hop trajectory makes about 2h+1 calls over a
context that grows by a 300-600-word document per call, so a 4-hop trajectory costs several
times a 1-hop one). The policy is the scripted demo policy that solves kv-search like an agent
(``forge_cli.tasks.demo_policies:kv_search``), scored by the tiny default model, which the loop
trains with CISPO; each output token takes ``--decode-s-per-token`` seconds to come back (the
scripted engine's emulated decode time, a sleep: without it the policy answers at once, the trainer
is the bottleneck and no scheduler ever waits). Every task is solvable, so what differs between the
schedulers is only which finished groups the trainer takes and when. Reported per scheduler, from the run's metrics.jsonl:

- steps done in the same wall time, and the trainer idle fraction (waiting for groups / step time);
- the **drift of the trained data's difficulty**: the mean hops of the groups each step trained,
  in the first and the second half of the run and overall, against the suite's 2.5 — a scheduler
  that favours fast, easy tasks trains below 2.5 and leaves the hard ones behind;
- the off-policy age of the trained samples (mean, max).

Held-out success against wall time, the third thing the issue asks of this comparison, is not
measured here: with the scripted policy every task is solved (success is 1 under every scheduler),
and on this machine the tiny model does not learn kv-search in minutes (benchmarks/RESULTS.md,
"Learning"). The schedulers' effect on learning needs a learning policy (a GPU run).

    python benchmarks/schedulers.py [--minutes 3] [--schedulers windowed_fifo fifo greedy bounded_staleness staleness_cap]
                                    [--max-staleness 2]

Writes benchmarks/results/schedulers.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

SCHEDULERS = ["windowed_fifo", "fifo", "greedy", "bounded_staleness", "staleness_cap"]


def in_flight(scheduler: str, args: argparse.Namespace) -> int:
    """``pool.max_active_groups`` of a run: ``--active``, but for ``staleness_cap``, which holds its cap
    with at most (S + 1)·P in flight (``bounded_staleness`` admits no more than that either)."""
    if scheduler == "staleness_cap":
        return min(args.active, (args.max_staleness + 1) * args.groups_per_step)
    return args.active


def settings(model: Path, runs: Path, scheduler: str, args: argparse.Namespace) -> dict[str, Any]:
    caps = {"bounded_staleness": {"pool.scheduler.max_head_offpolicyness": args.max_staleness},
            "staleness_cap": {"pool.scheduler.max_staleness": args.max_staleness}}.get(scheduler, {})
    return {**caps, "model.path": str(model), "model.engine.type": "scripted",
            "model.engine.policy": "forge_cli.tasks.demo_policies:kv_search",
            "model.engine.decode_s_per_token": args.decode_s_per_token, "gateway.port": 0, "gateway.socket": "",
            "run.dir": str(runs), "rollout.scaffold": "tool-call", "rollout.task": "kv-search",
            "rollout.concurrency": args.concurrency, "pool.max_active_groups": in_flight(scheduler, args),
            "pool.scheduler.type": scheduler, "train.groups_per_step": args.groups_per_step,
            "train.group_size": args.group_size, "train.engine": "torch", "train.eval_every": 0,
            "train.warmstart.when": "never", "train.checkpoint_every": 0}


def summarise(scheduler: str, run: Path, minutes: float) -> dict[str, Any]:
    from forge_cli.pool.store import DataPool
    from forge_cli.report.metrics import read_metrics

    steps = read_metrics(run).steps  # the records the loop wrote
    pool = DataPool.sqlite(run / "pool.sqlite")
    try:
        left = [g for g in pool.groups() if g.status.value not in ("consumed", "evaluation")]
    finally:
        pool.close()
    half = len(steps) // 2
    diff = [s.difficulty_mean for s in steps]

    def mean(xs: list[float]) -> float | None:
        return round(statistics.fmean(xs), 3) if xs else None

    return {"scheduler": scheduler, "minutes": minutes, "steps": len(steps),
            "trained_groups": sum(s.groups for s in steps),
            "trainer_idle_median": round(statistics.median(s.trainer_idle for s in steps), 3) if steps else None,
            "engine_idle_median": round(statistics.median(s.engine_idle for s in steps), 3) if steps else None,
            "step_s_median": round(statistics.median(s.step_s for s in steps), 2) if steps else None,
            "difficulty_first_half": mean(diff[:half]), "difficulty_second_half": mean(diff[half:]),
            "difficulty_trained": mean(diff), "groups_left_in_pool": len(left),
            "mean_age": mean([s.mean_age for s in steps]), "max_age": max((s.max_age for s in steps), default=None),
            "difficulty_per_step": diff, "time_s_per_step": [s.time_s for s in steps]}


async def one(scheduler: str, model: Path, runs: Path, args: argparse.Namespace) -> dict[str, Any]:
    from forge_cli.config import load_config
    from forge_cli.train.loop import train_loop

    config = load_config(env={}, overrides=settings(model, runs, scheduler, args))
    await train_loop(config, run=scheduler, minutes=args.minutes)
    row = summarise(scheduler, runs / scheduler, args.minutes)
    cells = [(row["steps"], 7, "d"), (row["trainer_idle_median"], 8, ".2f"), (row["step_s_median"], 8, ".2f"),
             (row["difficulty_first_half"], 10, ".2f"), (row["difficulty_second_half"], 8, ".2f"),
             (row["difficulty_trained"], 8, ".2f"), (row["groups_left_in_pool"], 8, "d"), (row["mean_age"], 7, ".2f"),
             (row["max_age"], 6, "d")]
    print(f"{scheduler:>18}" + "".join(f"{'—' if v is None else format(v, spec):>{w}}" for v, w, spec in cells), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedulers", nargs="+", default=SCHEDULERS, choices=SCHEDULERS)
    parser.add_argument("--minutes", type=float, default=3.0, help="wall time of each scheduler's run")
    parser.add_argument("--groups-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--active", type=int, default=12, help=(
        "pool.max_active_groups: groups in flight (staleness_cap: at most (S + 1)·P)"))
    parser.add_argument("--max-staleness", type=int, default=2, help=(
        "S of the two caps: bounded_staleness's max_head_offpolicyness, staleness_cap's max_staleness"))
    parser.add_argument("--concurrency", type=int, default=16, help="trajectories run at once")
    parser.add_argument("--decode-s-per-token", type=float, default=0.2, help=(
        "emulated decode time of each output token (the scripted engine's decode_s_per_token): without it the "
        "scripted policy answers faster than the trainer trains, and no scheduler ever waits"))
    parser.add_argument("--seed", type=int, default=0, help="the model's initialisation")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "schedulers.json")
    args = parser.parse_args()
    from forge_cli.engine.default_model import init_default_model

    root = Path(tempfile.mkdtemp(prefix="forge-bench-schedulers-"))
    model = init_default_model(root / "model", size="tiny", seed=args.seed)
    print(f"kv-search (1-4 hops), scripted solver decoding {args.decode_s_per_token:g} s a token, {args.minutes:g} min each, P={args.groups_per_step}, "
          f"n={args.group_size}, {args.active} groups in flight\n"
          f"{'scheduler':>18}{'steps':>7}{'idle':>8}{'step s':>8}{'hops 1st':>10}{'2nd':>8}{'all':>8}"
          f"{'left':>8}{'age':>7}{'max':>6}", flush=True)
    rows = [asyncio.run(one(s, model, root / "runs", args)) for s in args.schedulers]
    result = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "argv": sys.argv[1:], "suite_mean_difficulty": 2.5, "runs": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()

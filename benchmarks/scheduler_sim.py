"""Windowed FIFO vs strict FIFO vs greedy vs greedy with a staleness cap on a simulated generation
queue (DESIGN.md §4).

Tasks have a difficulty d ~ U(0, 1); a group of n trajectories finishes when its slowest one
does, each taking lognormal time with median 0.5·e^{1.5 d} (harder takes longer), and with
probability 0.5 % a Pareto(α = 1.2) tail multiplier. At most N groups are in flight (submitted
and not consumed, or consumed by a step whose weights are not out yet); the rollout side refills
the queue at once. The trainer takes P groups per step, all at once, through Forge's own
scheduler (`forge_cli.pool.scheduler.select`), then trains for a fixed time; heads past their
time budget are dropped.

Per window W ∈ {1, 0.1N, 0.3N, 0.5N, ∞}, and greedy (W = ∞) under AReaL's staleness cap S ∈ {1, 3}
(``bounded_staleness``: admission by Forge's own ``staleness_limit``, relative to the head's
version), medians over seeds:
- throughput: consumed groups per unit time, and the trainer's idle fraction;
- distribution shift: per block of 10 steps, |mean difficulty of what the trainer consumed −
  mean difficulty of the tasks submitted in the same span| (the groups at the same queue
  positions, i.e. what strict FIFO consumes), averaged over blocks; the KS distance between the
  two per block; and the same gap per single batch — all 0 for strict FIFO by construction;
- off-policy age: trainer version at consumption − version at submission (mean, max).

    python benchmarks/scheduler_sim.py [--steps 2000] [--seeds 9] [--quick]

Writes benchmarks/results/scheduler_sim.json and scheduler_sim.png.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from forge_cli.pool.scheduler import QueueEntry, select, staleness_limit  # noqa: E402


@dataclass
class Params:
    N: int = 64  # admission bound: active groups
    P: int = 4  # groups per train step (so N = (S+1)·P with S = 15)
    n: int = 4  # trajectories per group
    train_time: float = 0.2  # one train step; the trainer keeps up with the rollouts under greedy
    timeout: float = 6.0  # a head older than this (≈ 5× the median group time) is dropped
    sigma: float = 0.5  # lognormal spread of one trajectory's time
    tail_p: float = 0.005  # per trajectory: ≈ 2 % of groups have a Pareto-tailed straggler
    tail_alpha: float = 1.2
    steps: int = 2000
    block: int = 10  # steps per block for the shift measures


def group_time(rng: random.Random, d: float, p: Params) -> float:
    worst = 0.0
    for _ in range(p.n):
        t = 0.5 * math.exp(1.5 * d) * rng.lognormvariate(0.0, p.sigma)
        if rng.random() < p.tail_p:
            t *= rng.paretovariate(p.tail_alpha)
        worst = max(worst, t)
    return worst


def ks(a: list[float], b: list[float]) -> float:
    """Two-sample Kolmogorov–Smirnov distance."""
    a, b = sorted(a), sorted(b)
    i = j = 0
    best = 0.0
    while i < len(a) and j < len(b):
        x = min(a[i], b[j])
        while i < len(a) and a[i] <= x:
            i += 1
        while j < len(b) and b[j] <= x:
            j += 1
        best = max(best, abs(i / len(a) - j / len(b)))
    return best


def simulate(window: int | None, seed: int, p: Params, cap: int | None = None) -> dict:
    """One run; ``cap``: greedy's staleness cap S (admission ≤ staleness_limit, and ≤ N)."""
    rng = random.Random(seed)
    now, version, idle = 0.0, 0, 0.0
    difficulty: list[float] = []  # by queue index
    submitted_version: list[int] = []
    finish: dict[int, float] = {}
    active: dict[int, QueueEntry] = {}
    events: list[tuple[float, int]] = []
    batches: list[list[int]] = []
    ages: list[int] = []
    dropped = 0

    def limit() -> int:
        if cap is None:
            return p.N
        head = submitted_version[min(active)] if active else None
        return min(p.N, staleness_limit(cap, p.P, version, head))

    def refill() -> None:
        while len(active) + 1 <= limit():
            i = len(difficulty)
            d = rng.random()
            difficulty.append(d)
            submitted_version.append(version)
            finish[i] = now + group_time(rng, d, p)
            active[i] = QueueEntry(i, str(i), False, now, p.timeout)
            heapq.heappush(events, (finish[i], i))

    refill()
    while len(batches) < p.steps:
        batch: list[int] = []
        while not batch:
            while events and events[0][0] <= now:
                _, i = heapq.heappop(events)
                if i in active:
                    active[i] = QueueEntry(i, str(i), True, active[i].submitted_at, p.timeout)
            # the trainer takes its P groups at once (all or nothing), as forge's trainer does
            decision = select(list(active.values()), p.P, window, now, "drop", min_groups=p.P)
            for gid in decision.timed_out:
                active.pop(int(gid), None)
                dropped += 1
            for gid in decision.take:
                active.pop(int(gid))
                batch.append(int(gid))
            if not batch:
                refill()  # dropped groups free their slots at once; taken ones at the next version
                # wait for the next finish, or for the head's deadline
                head = min(active)
                deadline = active[head].submitted_at + p.timeout + 1e-9 if not active[head].complete else math.inf
                nxt = min(events[0][0] if events else math.inf, deadline)
                assert math.isfinite(nxt) and nxt >= now, "the simulation cannot make progress"
                idle += nxt - now
                now = nxt
        ages += [version - submitted_version[i] for i in batch]
        batches.append(batch)
        now += p.train_time
        version += 1
        refill()

    # distribution shift against what strict FIFO would have consumed at the same step
    order = [i for b in batches for i in b]
    fifo_order = sorted(order)
    def gap(size: int) -> float:
        gaps = []
        for s in range(0, len(order) - size + 1, size):
            mine = statistics.fmean(difficulty[i] for i in order[s:s + size])
            gaps.append(abs(mine - statistics.fmean(difficulty[i] for i in fifo_order[s:s + size])))
        return statistics.fmean(gaps)

    block = p.block * p.P
    kss = [
        ks([difficulty[i] for i in order[s:s + block]], [difficulty[i] for i in fifo_order[s:s + block]])
        for s in range(0, len(order) - block + 1, block)
    ]
    return {
        "throughput": len(order) / now,
        "idle_fraction": idle / now,
        "shift_gap": gap(block),
        "batch_gap": gap(p.P),
        "shift_ks": statistics.fmean(kss),
        "mean_offpolicy_age": statistics.fmean(ages),
        "max_offpolicy_age": max(ages),
        "dropped": dropped,
        "consumed_difficulty": statistics.fmean(difficulty[i] for i in order),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="100 steps, 2 seeds (a smoke run)")
    args = parser.parse_args()
    p = Params(steps=100 if args.quick else args.steps)
    seeds = range(2 if args.quick else args.seeds)
    policies = [
        ("fifo", 1, 1 / p.N),
        ("windowed_fifo 0.1N", math.ceil(0.1 * p.N), 0.1),
        ("windowed_fifo 0.3N", math.ceil(0.3 * p.N), 0.3),
        ("windowed_fifo 0.5N", math.ceil(0.5 * p.N), 0.5),
        ("greedy", None, None),
        ("bounded_staleness S=3", None, None),
        ("bounded_staleness S=1", None, None),
    ]
    caps = {name: int(name.rsplit("=", 1)[1]) for name, _, _ in policies if name.startswith("bounded_staleness")}
    t0 = time.time()
    runs = {name: [simulate(w, seed, p, caps.get(name)) for seed in seeds] for name, w, _ in policies}
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
    greedy = med["greedy"]
    rows = []
    for name, w, frac in policies:
        m = med[name]
        rows.append({
            "policy": name.split()[0],
            "max_head_offpolicyness": caps.get(name),
            "window": w if w is not None else "inf",
            "window_fraction": frac,
            "throughput": round(m["throughput"], 3),
            "throughput_vs_greedy": round(m["throughput"] / greedy["throughput"], 3),
            "idle_fraction": round(m["idle_fraction"], 3),
            "shift_gap": round(m["shift_gap"], 4),
            "batch_gap": round(m["batch_gap"], 4),
            "shift_ks": round(m["shift_ks"], 4),
            "shift_vs_greedy": round(m["shift_gap"] / greedy["shift_gap"], 3),
            "mean_offpolicy_age": round(m["mean_offpolicy_age"], 2),
            "max_offpolicy_age": int(m["max_offpolicy_age"]),
            "dropped_groups": int(m["dropped"]),
        })
    print(f"N={p.N} P={p.P} n={p.n} steps={p.steps} seeds={len(seeds)} (medians)  [{time.time() - t0:.1f} s]")
    head = (f"{'policy':<23}{'W':>5}{'thru/greedy':>12}{'idle':>7}{'shift gap':>10}{'KS':>7}{'batch gap':>10}"
            f"{'shift/greedy':>13}{'age mean':>9}{'max':>5}{'dropped':>8}")
    print(head)
    for (name, _, _), r in zip(policies, rows):
        print(f"{name:<23}{str(r['window']):>5}{r['throughput_vs_greedy']:>12.3f}{r['idle_fraction']:>7.3f}"
              f"{r['shift_gap']:>10.4f}{r['shift_ks']:>7.3f}{r['batch_gap']:>10.4f}{r['shift_vs_greedy']:>13.3f}"
              f"{r['mean_offpolicy_age']:>9.2f}{r['max_offpolicy_age']:>5}{r['dropped_groups']:>8}")
    out = HERE / "results" / "scheduler_sim.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for (name, _, _), r in zip(policies, rows):
            ax.scatter(r["throughput_vs_greedy"], r["shift_vs_greedy"], s=50)
            ax.annotate(name, (r["throughput_vs_greedy"], r["shift_vs_greedy"]), textcoords="offset points", xytext=(5, 5), fontsize=8)
        ax.set_xlabel("throughput / greedy's")
        ax.set_ylabel("distribution shift / greedy's")
        ax.set_title(f"Scheduler trade-off (N={p.N}, P={p.P}, {len(seeds)} seeds)")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(HERE / "results" / "scheduler_sim.png", dpi=120)
        print(f"wrote {out.relative_to(HERE.parent)} and scheduler_sim.png")
    except ImportError:
        print(f"wrote {out.relative_to(HERE.parent)} (matplotlib missing: no plot)")


if __name__ == "__main__":
    main()

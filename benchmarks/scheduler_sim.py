"""The schedulers like for like on a simulated generation queue (DESIGN.md §4): every policy keeps
the same N groups in flight and takes the same P groups a step; only which finished groups the
trainer may take, and whether it must wait, differ.

Tasks have a difficulty d ~ U(0, 1); a group of n trajectories finishes when its slowest one
does, each taking lognormal time with median base·e^{spread·d} (harder takes longer), and with a
small probability a Pareto tail multiplier (the workloads are in WORKLOADS). At most N groups are
in flight (submitted and not consumed, or consumed by a step whose weights are not out yet); the
rollout side refills the queue at once. The trainer takes its P groups a step all at once (or
none), then trains for a fixed time; a stuck group it waits on is dropped past its time budget.

Policies, each swept over its knob at the same N and P (strict FIFO and greedy are both ends):
- ``windowed_fifo`` W: any complete group among the W oldest active ones (Forge's ``select``);
  its maximum age is N/P − 1 + ⌈(W − 1)/P⌉;
- ``take_cap`` S: bounded staleness *with the same N in flight* — greedy takes (oldest complete
  first), except that every group must be trained within S versions of its submission: a step must
  take the groups whose deadline has come (earliest deadline first), and waits for them if they are
  unfinished (Forge's ``select_capped``). With N in flight and P a step the mean age is about
  N/P − 1 whatever the policy (Little's law), so a cap holds only from S = N/P − 1 up;
- ``bounded_staleness`` S: Forge's ``[pool.scheduler]`` type as it is, greedy takes with the cap on
  *admission* (``staleness_limit``), under the same ``max_active_groups`` = N: it holds fewer than
  N in flight whenever the head is old, which is how it keeps the cap;
- with ``--variants``: ``overtake_budget`` K (greedy takes while at most K groups are consumed
  ahead of the head: the window's count without its position; K = (S + 1)·P − N matches S),
  ``version_window`` V and ``time_window`` T (the window measured from the head's submission in
  versions, or in T train steps' worth of time), and ``bounded_staleness`` S = 3 and 1, whose
  admission holds (S + 1)·P < N in flight (the 2026-12-01 rows; not like for like).

Measures, medians over seeds (common random numbers: seed s draws the same task sequence for every
policy): throughput (consumed groups per unit time, and the trainer's idle fraction); distribution
shift (per block of 10 steps, |mean difficulty consumed − mean difficulty of the same number of
groups in submission order|, i.e. what strict FIFO consumes; its KS distance; the gap per batch);
off-policy age (trainer version at consumption − version at submission: mean and max). It prints,
per workload, the table, each point against the other families' frontiers (throughput at the same
shift, interpolated, and at no larger maximum age), and the caps against the window with the same
age bound seed by seed (paired).

    python benchmarks/scheduler_sim.py [--steps 2000] [--seeds 9] [--N 64] [--P 4] [--quick] [--variants]
                                       [--workloads base,heavy_tail] [--out benchmarks/results]

Writes benchmarks/results/scheduler_sim.json (one row per workload × policy) and scheduler_sim.png
(the frontiers: throughput against shift and against maximum age, one row of panels a workload).
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from scheduler_sim_report import (
    frontier_rows,
    plot,
    print_frontiers,
    print_paired,
    print_table,
)

from forge_cli.pool.scheduler import QueueEntry, select, select_capped, staleness_limit


@dataclass(frozen=True)
class Workload:
    name: str
    spread: float  # median trajectory time = base · e^{spread · d}
    base: float
    sigma: float  # lognormal spread of one trajectory's time
    tail_p: float  # per trajectory: probability of a Pareto-tailed straggler
    tail_alpha: float
    train_time: float  # one train step: greedy keeps the trainer busy (≈ 1.4× more supply than it eats)
    timeout: float  # a group the trainer waits on is dropped when older than this (≈ p98.5 of a group's time)
    note: str


WORKLOADS = {
    "base": Workload("base", 1.5, 0.5, 0.5, 0.005, 1.2, 0.2, 6.0,
                     "today's: trajectories p1–p99 20×, groups 12× (median 1.8, mean ≈ 2.2), 2 % of groups with a Pareto straggler"),
    "heavy_tail": Workload("heavy_tail", 3.0, 0.25, 0.7, 0.02, 1.1, 0.4, 20.0,
                           "agent-like: trajectories p1–p99 140×, groups 77× (median 2.4, mean ≈ 4.5), 8 % of groups with a Pareto straggler"),
}


@dataclass(frozen=True)
class Params:
    N: int = 64  # groups in flight, for every policy
    P: int = 4  # groups per train step (N/P − 1 = 15: strict FIFO's age)
    n: int = 4  # trajectories per group
    steps: int = 2000
    block: int = 10  # steps per block for the shift measures


@dataclass(frozen=True)
class Policy:
    name: str  # windowed_fifo (fifo: W = 1, greedy: W = ∞) | take_cap | bounded_staleness (Forge's) | the variants
    knob: int | None  # W (None: ∞) | S | S | K, V (versions) or T (train steps' worth of time)

    @property
    def label(self) -> str:
        if self.name == "windowed_fifo":
            return {1: "fifo", None: "greedy"}.get(self.knob, f"windowed_fifo W={self.knob}")
        if self.name == "bounded_staleness":
            return f"bounded_staleness S={self.knob} (admission)"
        symbol = {"take_cap": "S", "overtake_budget": "K", "version_window": "V", "time_window": "T"}[self.name]
        return f"{self.name} {symbol}={self.knob}"


def group_time(rng: random.Random, d: float, p: Params, w: Workload) -> float:
    worst = 0.0
    for _ in range(p.n):
        t = w.base * math.exp(w.spread * d) * rng.lognormvariate(0.0, w.sigma)
        if rng.random() < w.tail_p:
            t *= rng.paretovariate(w.tail_alpha)
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


def take_greedy_under(active: list[QueueEntry], P: int, now: float,
                      allowed: Callable[[QueueEntry, QueueEntry, int], bool]) -> tuple[list[int], list[int]]:
    """Greedy takes (oldest complete first) of the groups ``allowed(group, head, ahead)`` admits, where
    ``ahead`` counts the groups consumed past the head so far; the head itself is always allowed.
    All or nothing, and heads past their budget time out, as in Forge's ``select``."""
    remaining = sorted(active, key=lambda e: e.queue_index)
    take: list[int] = []
    dropped: list[int] = []
    before_first_take: int | None = None
    while remaining and len(take) < P:
        head = remaining[0]
        if not head.complete and head.expired(now):
            dropped.append(remaining.pop(0).queue_index)
            continue
        chosen = next((e for e in remaining if e.complete and (e is head or allowed(e, head, len(remaining)))), None)
        if chosen is None:
            break
        if before_first_take is None:
            before_first_take = len(dropped)
        take.append(chosen.queue_index)
        remaining.remove(chosen)
    if len(take) < P:  # all or nothing; only the real head's timeouts stand (as in select)
        return [], dropped if before_first_take is None else dropped[:before_first_take]
    return take, dropped


class Tasks:
    """Seed s's task sequence (difficulty, group time), the same for every policy; drawn lazily."""

    _cache: ClassVar[dict[tuple, Tasks]] = {}

    def __init__(self, seed: int, p: Params, w: Workload) -> None:
        self.rng, self.p, self.w = random.Random(seed), p, w
        self.items: list[tuple[float, float]] = []

    @classmethod
    def of(cls, seed: int, p: Params, w: Workload) -> Tasks:
        key = (seed, p.n, w)
        if key not in cls._cache:
            cls._cache = {k: v for k, v in cls._cache.items() if k[1:] == key[1:]}  # one workload at a time
            cls._cache[key] = cls(seed, p, w)
        return cls._cache[key]

    def __getitem__(self, i: int) -> tuple[float, float]:
        while len(self.items) <= i:
            d = self.rng.random()
            self.items.append((d, group_time(self.rng, d, self.p, self.w)))
        return self.items[i]


def simulate(policy: Policy, seed: int, p: Params, w: Workload) -> dict:
    tasks = Tasks.of(seed, p, w)
    now, version, idle = 0.0, 0, 0.0
    difficulty: list[float] = []  # by queue index
    submitted_version: list[int] = []
    submitted_time: list[float] = []
    active: dict[int, QueueEntry] = {}
    events: list[tuple[float, int]] = []
    batches: list[list[int]] = []
    ages: list[int] = []
    dropped = 0
    window = policy.knob if policy.name == "windowed_fifo" else None

    def limit() -> int:
        if policy.name != "bounded_staleness":
            return p.N
        head = submitted_version[min(active)] if active else None
        return min(p.N, staleness_limit(policy.knob, p.P, version, head))

    def refill() -> None:
        while len(active) + 1 <= limit():
            i = len(difficulty)
            d, t = tasks[i]
            difficulty.append(d)
            submitted_version.append(version)
            submitted_time.append(now)
            heapq.heappush(events, (now + t, i))
            active[i] = QueueEntry(i, str(i), False, now, w.timeout, version)

    def decide() -> tuple[list[int], list[int], Callable[[int], bool] | None]:
        """This step's take (all or nothing), the groups timed out, and which groups' completion
        could change a refusal (None: any), so that the others need not wake the trainer."""
        entries = list(active.values())
        if policy.name == "take_cap":  # Forge's own rule (not a [pool.scheduler] type yet)
            d = select_capped(entries, p.P, version, policy.knob, now, "drop")
            take, out = [int(g) for g in d.take], [int(g) for g in d.timed_out]
            if take or not active:
                return take, out, None
            # it waits on a group due now or soon: only one that is unfinished and due by the first
            # deadline whose demand is unmet can change that (the others' completions need no decision)
            return take, out, blocking([e for e in active.values() if e.queue_index not in out], policy.knob)
        return (*rule(entries), None)

    def blocking(entries: list[QueueEntry], cap: int) -> Callable[[int], bool] | None:
        done = 0
        entries.sort(key=lambda e: (e.version, e.queue_index))
        for j, e in enumerate(entries):
            done += e.complete
            if j + 1 < len(entries) and entries[j + 1].version == e.version:
                continue
            if done < j + 1 - (e.version + cap - version) * p.P:
                return {f.queue_index for f in entries[: j + 1] if not f.complete}.__contains__
        return None

    def rule(entries: list[QueueEntry]) -> tuple[list[int], list[int]]:
        if policy.name == "overtake_budget":  # consumed past the head: (queue end − head) − still active
            return take_greedy_under(entries, p.P, now, lambda e, h, left: len(difficulty) - h.queue_index - left < policy.knob)
        if policy.name == "version_window":
            return take_greedy_under(entries, p.P, now, lambda e, h, left: (
                submitted_version[e.queue_index] <= submitted_version[h.queue_index] + policy.knob))
        if policy.name == "time_window":  # knob: train steps' worth of time
            return take_greedy_under(entries, p.P, now, lambda e, h, left: (
                submitted_time[e.queue_index] <= submitted_time[h.queue_index] + policy.knob * w.train_time))
        # the trainer takes its P groups at once (all or nothing), as forge's trainer does
        decision = select(entries, p.P, window, now, "drop", min_groups=p.P)
        return [int(g) for g in decision.take], [int(g) for g in decision.timed_out]

    refill()
    while len(batches) < p.steps:
        batch: list[int] = []
        while not batch:
            while events and events[0][0] <= now:
                _, i = heapq.heappop(events)
                if i in active:
                    e = active[i]
                    active[i] = QueueEntry(i, e.group_id, True, e.submitted_at, e.timeout_s, e.version)
            take, timed_out, relevant = decide()
            for i in timed_out:
                del active[i]
                dropped += 1
            for i in take:
                del active[i]
            batch = take
            if not batch:
                refill()  # dropped groups free their slots at once; taken ones at the next version
                # wait for the next finish that can matter, or for the next time budget to run out (the
                # trainer polls: a group behind the head may be the one it waits on once the head is taken)
                expiry = min((t for e in active.values() if not e.complete and (t := e.submitted_at + w.timeout + 1e-9) > now),
                             default=math.inf)
                if window is not None and active:
                    # only a completion inside the window where the take stopped (its head moves as it takes) can matter
                    partial = select(list(active.values()), p.P, window, now, "drop")
                    gone = set(partial.take) | set(partial.timed_out)
                    stop = min((i for i in active if str(i) not in gone), default=math.inf)
                    relevant = (stop + window).__gt__
                while relevant is not None and events and events[0][0] < expiry and not relevant(events[0][1]):
                    _, i = heapq.heappop(events)  # completes before anything that matters: no decision needed
                    if i in active:
                        e = active[i]
                        active[i] = QueueEntry(i, e.group_id, True, e.submitted_at, e.timeout_s, e.version)
                nxt = min(events[0][0] if events else math.inf, expiry)
                assert math.isfinite(nxt) and nxt >= now, "the simulation cannot make progress"
                idle += nxt - now
                now = nxt
        ages += [version - submitted_version[i] for i in batch]
        batches.append(batch)
        now += w.train_time
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


def policies(p: Params, quick: bool = False, variants: bool = False) -> list[Policy]:
    """Each family's sweep; FIFO is W = 1, greedy W = ∞. S from N/P − 1 (the least a cap allows at
    N in flight); W = (S − N/P + 1)·P + 1 has the age bound S (N/P − 1 + ⌈(W − 1)/P⌉), and so has
    K = (S + 1)·P − N. ``variants``: the other windows too (overtake budget, in versions, in time),
    and Forge's admission cap below N/P − 1 (fewer than N in flight: the 2026-12-01 rows)."""
    s0 = p.N // p.P - 1
    if quick:
        return ([Policy("windowed_fifo", w) for w in (1, math.ceil(0.3 * p.N), None)]
                + [Policy("take_cap", s0 + k) for k in (0, 2, 5)] + [Policy("bounded_staleness", s0 + 5)])
    windows = (1, *sorted({max(2, math.ceil(f * p.N)) for f in (0.1, 0.2, 0.3, 0.5, 0.75, 1.0)}), None)
    out = ([Policy("windowed_fifo", w) for w in windows]
           + [Policy("take_cap", s0 + k) for k in (0, 2, 3, 5, 8, 12, 16)]
           + [Policy("bounded_staleness", s0 + k) for k in (0, 5, 16)])
    if variants:
        out += ([Policy("overtake_budget", k * p.P) for k in (1, 2, 5, 8, 12)]
                + [Policy("version_window", v) for v in (0, 1, 2, 4, 8)]
                + [Policy("time_window", t) for t in (1, 2, 5, 10, 20)]
                + [Policy("bounded_staleness", s) for s in (3, 1)])
    return out


def paired(runs: dict[Policy, list[dict]], p: Params) -> list[dict]:
    """Seed by seed, at the same age bound: the take cap S (and Forge's admission cap S) against the
    window W with N/P − 1 + ⌈(W − 1)/P⌉ = S, in throughput as a fraction of greedy's."""
    greedy = [r["throughput"] for r in runs[Policy("windowed_fifo", None)]]
    out = []
    for pol, mine in runs.items():
        if pol.name != "windowed_fifo" or pol.knob in (1, None):
            continue
        bound = p.N // p.P - 1 + math.ceil((pol.knob - 1) / p.P)
        entry: dict = {"window": pol.knob, "age_bound": bound}
        for other in ("take_cap", "bounded_staleness"):
            if Policy(other, bound) in runs:
                gains = [(c["throughput"] - w["throughput"]) / g
                         for c, w, g in zip(runs[Policy(other, bound)], mine, greedy)]
                shifts = [c["shift_gap"] - w["shift_gap"] for c, w in zip(runs[Policy(other, bound)], mine)]
                entry[other] = {"throughput_gain": round(statistics.median(gains), 4), "min": round(min(gains), 4),
                                "max": round(max(gains), 4), "seeds_better": sum(x > 0 for x in gains),
                                "shift_gap_change": round(statistics.median(shifts), 4)}
        if len(entry) > 2:
            out.append(entry)
    return out


def family(policy: Policy) -> str:
    """fifo and greedy are the ends every family shares; the others are named for their rule."""
    if policy.name == "windowed_fifo" and policy.knob in (1, None):
        return "fifo" if policy.knob == 1 else "greedy"
    return policy.name


def row(workload: str, policy: Policy, m: dict, greedy: dict, p: Params, pair: dict | None = None) -> dict:
    """One JSON row; the keys before ``workload`` are the ones the 2026-11-29 file had."""
    fam = family(policy)
    w = policy.knob if policy.name == "windowed_fifo" else None
    return {
        "policy": fam,
        "max_head_offpolicyness": policy.knob if fam in ("take_cap", "bounded_staleness") else None,
        "window": "inf" if fam == "greedy" else w,
        "window_fraction": None if w is None else round(w / p.N, 4),
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
        "workload": workload,
        "label": policy.label,
        "family": fam,
        "knob": policy.knob,
        "cap_by": {"take_cap": "take", "bounded_staleness": "admission"}.get(fam),
        "overtake_budget": policy.knob if fam == "overtake_budget" else None,
        "in_flight": p.N if fam != "bounded_staleness" else min(p.N, (policy.knob + 1) * p.P),  # the most at once
        "like_for_like": fam != "bounded_staleness" or (policy.knob + 1) * p.P >= p.N,
        "same_age_bound": pair,  # windows: the caps with the same age bound, seed by seed (paired)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=9)
    parser.add_argument("--N", type=int, default=Params.N, help="groups in flight (default %(default)s)")
    parser.add_argument("--P", type=int, default=Params.P, help="groups per train step (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="100 steps, 2 seeds, a few policies (a smoke run)")
    parser.add_argument("--variants", action="store_true",
                        help="also the overtake budget and windows in versions and in time (3× longer)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="folder for scheduler_sim.json and .png")
    args = parser.parse_args()
    if not args.P <= args.N:
        parser.error("--P must be at most --N")
    p = Params(N=args.N, P=args.P, steps=100 if args.quick else args.steps)
    seeds = range(2 if args.quick else args.seeds)
    rows: list[dict] = []
    t0 = time.time()
    for name in args.workloads.split(","):
        w = WORKLOADS[name]
        runs = {pol: [simulate(pol, seed, p, w) for seed in seeds] for pol in policies(p, args.quick, args.variants)}
        med = {pol: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for pol, rs in runs.items()}
        greedy = med[Policy("windowed_fifo", None)]
        pairs = {e["window"]: e for e in paired(runs, p)}
        wrows = [row(name, pol, m, greedy, p, pairs.get(pol.knob) if pol.name == "windowed_fifo" else None)
                 for pol, m in med.items()]
        print(f"\n== {name}: {w.note}; train step {w.train_time}, timeout {w.timeout}")
        print(f"N={p.N} P={p.P} n={p.n} steps={p.steps} seeds={len(seeds)} (medians)  [{time.time() - t0:.1f} s so far]")
        print_table(wrows)
        print_frontiers(frontier_rows(wrows))
        print_paired(list(pairs.values()))
        rows += wrows
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "scheduler_sim.json"
    out.write_text(json.dumps(rows, indent=2) + "\n")
    written = plot(rows, args.out / "scheduler_sim.png", p, len(seeds))
    print(f"\nwrote {out}" + (f" and {written}" if written else " (matplotlib missing: no plot)")
          + f"  [{time.time() - t0:.1f} s]")


if __name__ == "__main__":
    main()

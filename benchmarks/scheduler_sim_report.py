"""Tables, frontier comparisons and plots for benchmarks/scheduler_sim.py."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

FAMILIES = ("windowed_fifo", "take_cap", "overtake_budget", "version_window", "time_window")  # N in flight, all
ENDS = ("fifo", "greedy")


def print_table(rows: list[dict]) -> None:
    head = (f"{'policy':<38}{'thru/greedy':>12}{'idle':>7}{'shift gap':>10}{'KS':>7}{'batch gap':>10}"
            f"{'shift/greedy':>13}{'age mean':>9}{'max':>5}{'dropped':>8}{'in flight':>10}")
    print(head)
    for r in rows:
        print(f"{r['label']:<38}{r['throughput_vs_greedy']:>12.3f}{r['idle_fraction']:>7.3f}"
              f"{r['shift_gap']:>10.4f}{r['shift_ks']:>7.3f}{r['batch_gap']:>10.4f}{r['shift_vs_greedy']:>13.3f}"
              f"{r['mean_offpolicy_age']:>9.2f}{r['max_offpolicy_age']:>5}{r['dropped_groups']:>8}{r['in_flight']:>10}")


def curve(rows: list[dict], fam: str) -> list[dict]:
    """A family's points with the two ends every family shares (FIFO and greedy)."""
    return [r for r in rows if r["like_for_like"] and r["family"] in (fam, *ENDS)]


def upper(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The non-dominated points (x: less is better, y: more is better), by x."""
    out: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda q: (q[0], -q[1])):
        if not out or y > out[-1][1]:
            out.append((x, y))
    return out


def at_shift(front: list[tuple[float, float]], x: float) -> float:
    """The frontier's throughput at shift ``x``: linear between its points (what mixing two
    knob settings would give), flat beyond its right end; None left of its left end."""
    if not front or x < front[0][0]:
        return float("nan")
    for (x0, y0), (x1, y1) in pairwise(front):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else max(y0, y1)
    return front[-1][1]


def at_age(points: list[dict], age: int) -> float:
    """The best throughput among ``points`` whose maximum age is at most ``age``."""
    ok = [r["throughput_vs_greedy"] for r in points if r["max_offpolicy_age"] <= age]
    return max(ok) if ok else float("nan")


def frontier_rows(rows: list[dict]) -> list[dict[str, Any]]:
    """For each point of a family (ends excluded): the other families' throughput at the same shift
    and at no larger maximum age, as fractions of greedy's."""
    fronts = {f: upper([(r["shift_vs_greedy"], r["throughput_vs_greedy"]) for r in curve(rows, f)]) for f in FAMILIES}
    out = []
    for r in rows:
        if r["family"] not in FAMILIES:
            continue
        entry: dict[str, Any] = {"label": r["label"], "family": r["family"], "throughput": r["throughput_vs_greedy"],
                                 "shift": r["shift_vs_greedy"], "max_age": r["max_offpolicy_age"]}
        for f in FAMILIES:
            if f != r["family"] and any(q["family"] == f for q in rows):
                entry[f"{f}@shift"] = round(at_shift(fronts[f], r["shift_vs_greedy"]), 3)
                entry[f"{f}@age"] = round(at_age(curve(rows, f), r["max_offpolicy_age"]), 3)
        out.append(entry)
    return out


def print_paired(entries: list[dict]) -> None:
    if not entries:
        return
    print("at the same age bound, seed by seed: the caps' throughput − the window's (fraction of greedy's): "
          "median [min, max], seeds better; and the change in shift gap")
    for e in entries:
        cells = []
        for f in ("take_cap", "bounded_staleness"):
            if f in e:
                d = e[f]
                cells.append(f"{f} {d['throughput_gain']:+.3f} [{d['min']:+.3f}, {d['max']:+.3f}] {d['seeds_better']} better, "
                             f"shift gap {d['shift_gap_change']:+.4f}")
        print(f"  W={e['window']:<3} S={e['age_bound']:<3} " + " | ".join(cells))


def print_frontiers(entries: list[dict[str, Any]]) -> None:
    others = [f for f in FAMILIES if any(f"{f}@shift" in e for e in entries)]
    print("frontiers (throughput / greedy's): each point against the other families at the same shift "
          "(interpolated) and at no larger maximum age")
    print(f"{'policy':<36}{'thru':>7}{'shift':>7}{'age':>5}" + "".join(f"{f + ' @shift':>27}{'@age':>7}" for f in others))
    for e in entries:
        cells = "".join(f"{e.get(f + '@shift', float('nan')):>27.3f}{e.get(f + '@age', float('nan')):>7.3f}" for f in others)
        print(f"{e['label']:<36}{e['throughput']:>7.3f}{e['shift']:>7.3f}{e['max_age']:>5}{cells}")


STYLE = {"windowed_fifo": ("C0", "o", "windowed FIFO (W)"), "take_cap": ("C3", "s", "staleness cap on takes (S)"),
         "bounded_staleness": ("0.5", "x", "Forge's bounded_staleness: cap on admission (S)"),
         "overtake_budget": ("C2", "^", "overtake budget (K)"), "version_window": ("C4", "v", "window in versions (V)"),
         "time_window": ("C1", "D", "window in time (T train steps)")}


def plot(rows: list[dict], path: Path, p: Any, seeds: int) -> str | None:
    """Two panels a workload: throughput against shift, and against maximum age."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    fig, axes = plt.subplots(len(workloads), 2, figsize=(11, 4.2 * len(workloads)), squeeze=False)
    for (ax_shift, ax_age), wl in zip(axes, workloads):
        wrows = [r for r in rows if r["workload"] == wl]
        for fam, (color, marker, name) in STYLE.items():
            # a family's own points and the end it tends to (S, K, V, T → ∞: greedy); FIFO is W = 1
            pts = [r for r in wrows if r["family"] in (fam, "greedy") or (fam == "windowed_fifo" and r["family"] == "fifo")]
            if not any(r["family"] == fam for r in pts):
                continue
            pts = sorted(pts, key=lambda r: (r["family"] == "greedy", r["family"] != "fifo", r["knob"] or 0))
            for ax, key in ((ax_shift, "shift_vs_greedy"), (ax_age, "max_offpolicy_age")):
                if ax is ax_shift and fam == "bounded_staleness":
                    continue  # off the chart (noted in the panel)
                ax.plot([r[key] for r in pts], [r["throughput_vs_greedy"] for r in pts], color=color, marker=marker,
                        ms=5, lw=1.2, alpha=0.85, label=name)
                for r in pts:
                    if r["family"] == fam:
                        ax.annotate(str(r["knob"]), (r[key], r["throughput_vs_greedy"]), textcoords="offset points",
                                    xytext=(4, -9), fontsize=7, color=color)
        for r in wrows:
            if r["family"] in ENDS:
                for ax, key in ((ax_shift, "shift_vs_greedy"), (ax_age, "max_offpolicy_age")):
                    ax.scatter([r[key]], [r["throughput_vs_greedy"]], s=70, color="k", zorder=5)
                    ax.annotate(r["family"], (r[key], r["throughput_vs_greedy"]), textcoords="offset points",
                                xytext=(6, 4), fontsize=8)
        near = [r["shift_vs_greedy"] for r in wrows if r["family"] in ("windowed_fifo", "take_cap", *ENDS)]
        far = [r for r in wrows if r["family"] == "bounded_staleness" and r["shift_vs_greedy"] > 1.15 * max(near)]
        ax_shift.set_xlim(-0.03, 1.15 * max(near))
        if far:
            ax_shift.text(0.02, 0.97, "Forge's bounded_staleness, off the chart: shift "
                          f"{min(r['shift_vs_greedy'] for r in far):.1f}–{max(r['shift_vs_greedy'] for r in far):.1f}× greedy's",
                          transform=ax_shift.transAxes, fontsize=7, va="top", color="0.4")
        ax_shift.set_xlabel("distribution shift / greedy's (10-step blocks)")
        ax_age.set_xlabel("maximum off-policy age (versions)")
        for ax in (ax_shift, ax_age):
            ax.set_ylabel("throughput / greedy's")
            ax.set_title(f"{wl}: N={p.N} in flight, P={p.P}, medians of {seeds} seeds", fontsize=9)
            ax.grid(alpha=0.3)
        ax_age.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name

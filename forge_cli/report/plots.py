"""The PNG figures of ``forge report``: one run, or several overlaid on the same axes (the legend
names the runs). :data:`PLOTS` is the one table of them; a figure whose data no run has is not
drawn. Figures are built on matplotlib's object API (``Figure``, saved through Agg), never through
pyplot, so no global backend is set and nothing opens a window.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from forge_cli.errors import ForgeError
from forge_cli.records.metrics import finite
from forge_cli.report.metrics import RunMetrics

Getter = Callable[[Any], "float | None"]


def _figure(panels: int, *, width: float = 5.0, height: float = 3.4) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ForgeError("forge report needs matplotlib: pip install 'forge-cli[report]'") from None
    fig = Figure(figsize=(width * panels, height), layout="constrained")
    return fig, [fig.add_subplot(1, panels, i + 1) for i in range(panels)]


def _color(i: int) -> str:
    return f"C{i % 10}"


def _label(runs: list[RunMetrics], run: RunMetrics, what: str = "") -> str:
    """The legend entry: the run's name when several are overlaid, then what the line is."""
    parts = ([run.name] if len(runs) > 1 else []) + ([what] if what else [])
    return " · ".join(parts) or run.name


def _xy(lines: list[Any], get: Getter, x: str) -> tuple[list[float], list[float]]:
    pts = [(getattr(line, x), get(line)) for line in lines]
    pts = [(a, b) for a, b in pts if a is not None and b is not None]
    return [a for a, _ in pts], [b for _, b in pts]


def _line(ax: Any, lines: list[Any], get: Getter, x: str = "step", **style: Any) -> None:
    """Plot ``get`` of the ``lines`` against ``x`` on ``ax``, if any line has both."""
    a, b = _xy(lines, get, x)
    if a:
        ax.plot(a, b, **style)


def _has(runs: list[RunMetrics], lines: str, get: Getter) -> bool:
    return any(get(line) is not None for run in runs for line in getattr(run, lines))


def _has_time(runs: list[RunMetrics]) -> bool:
    return any(line.time_s is not None for run in runs for line in run.steps)


def _axes_x(ax: Any, x: str) -> None:
    ax.set_xlabel("step" if x == "step" else "wall time (s)")
    ax.grid(alpha=0.3)


def _legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")


def _over_steps_and_time(runs: list[RunMetrics], title: str, ylabel: str,
                         series: list[tuple[str, str, Getter, str]]) -> Any:
    """Panels over steps and, where lines have ``time_s``, over wall time; ``series`` is
    (which lines, what, getter, style) with style ``"-"`` (a line) or ``"o-"`` (points)."""
    xs = ["step", "time_s"] if _has_time(runs) else ["step"]
    fig, axes = _figure(len(xs))
    for ax, x in zip(axes, xs):
        for i, run in enumerate(runs):
            for lines, what, get, style in series:
                points = style == "o-"
                _line(ax, getattr(run, lines) if lines != "heldout" else run.heldout, get, x, color=_color(i),
                      label=_label(runs, run, what), marker="o" if points else None, markersize=4,
                      linestyle="--" if points else "-", alpha=1.0 if points else 0.85)
        ax.set_title(f"{title} over {'steps' if x == 'step' else 'wall time'}")
        ax.set_ylabel(ylabel)
        _axes_x(ax, x)
        _legend(ax)
    return fig


def reward(runs: list[RunMetrics]) -> Any:
    if not _has(runs, "steps", lambda s: s.reward_mean):
        return None
    return _over_steps_and_time(runs, "mean reward", "reward", [("steps", "", lambda s: s.reward_mean, "-")])


def success(runs: list[RunMetrics]) -> Any:
    if not (_has(runs, "steps", lambda s: s.success) or _has(runs, "evals", lambda e: e.success)):
        return None
    fig = _over_steps_and_time(runs, "success", "success rate", [
        ("steps", "train", lambda s: s.success, "-"), ("heldout", "held-out eval", lambda e: e.success, "o-")])
    for i, run in enumerate(runs):  # where RL began: the warm start's held-out rate, or the starting policy's
        warm = finite([w.heldout_success for w in run.warmstart])
        start = warm[-1] if warm else run.state.get("first_heldout_success")
        if isinstance(start, (int, float)):
            what = "warm start" if warm else f"start: {run.state.get('starting_policy') or 'step 0'}".replace("the ", "")
            for ax in fig.axes:
                ax.axhline(start, color=_color(i), linestyle=":", linewidth=1, label=_label(runs, run, what))
                _legend(ax)
    return fig


def reward_components(runs: list[RunMetrics]) -> Any:
    components = sorted({c for run in runs for c in run.components})
    if not components:
        return None
    fig, axes = _figure(len(components), width=4.0)
    for ax, comp in zip(axes, components):
        for i, run in enumerate(runs):
            _line(ax, run.steps, lambda s: s.rewards.get(comp), color=_color(i), label=_label(runs, run))
        ax.set_title(f"reward: {comp}")
        _axes_x(ax, "step")
        _legend(ax)
    return fig


def throughput(runs: list[RunMetrics]) -> Any:
    if not any(_has(runs, "steps", g) for g in (lambda s: s.rollout_tokens_per_s, lambda s: s.train_tokens_per_s,
                                                lambda s: s.samples_per_s)):
        return None
    fig, (tok, smp) = _figure(2)
    for i, run in enumerate(runs):
        for what, get, style in (("rollout", lambda s: s.rollout_tokens_per_s, "-"),
                                 ("train", lambda s: s.train_tokens_per_s, "--")):
            _line(tok, run.steps, get, linestyle=style, color=_color(i), label=_label(runs, run, what))
        _line(smp, run.steps, lambda s: s.samples_per_s, color=_color(i), label=_label(runs, run))
    tok.set_title("tokens/s")
    smp.set_title("samples/s")
    for ax in (tok, smp):
        _axes_x(ax, "step")
        _legend(ax)
    return fig


def offpolicy_age(runs: list[RunMetrics]) -> Any:
    if not (_has(runs, "steps", lambda s: s.mean_age) or _has(runs, "steps", lambda s: s.max_age)
            or any(s.ages for r in runs for s in r.steps)):
        return None
    from matplotlib.ticker import MaxNLocator

    fig, (per_step, hist) = _figure(2)
    width = 0.8 / len(runs)
    for i, run in enumerate(runs):
        for what, get, style in (("mean", lambda s: s.mean_age, "-"), ("max", lambda s: s.max_age, ":")):
            _line(per_step, run.steps, get, linestyle=style, color=_color(i), label=_label(runs, run, what))
        counts: dict[int, int] = {}
        for s in run.steps:
            for age, n in s.ages.items():
                counts[age] = counts.get(age, 0) + n
        if counts:
            ages = sorted(counts)
            hist.bar([a + (i - (len(runs) - 1) / 2) * width for a in ages], [counts[a] for a in ages], width=width,
                     color=_color(i), label=_label(runs, run))
    per_step.set_title("off-policy age per step")
    per_step.set_ylabel("trainer version − sampling version")
    _axes_x(per_step, "step")
    hist.xaxis.set_major_locator(MaxNLocator(integer=True))
    hist.set_title("off-policy ages of all samples")
    hist.set_xlabel("age")
    hist.set_ylabel("samples")
    for ax in (per_step, hist):
        _legend(ax)
    return fig


def prefix_saving(runs: list[RunMetrics]) -> Any:
    if not _has(runs, "steps", lambda s: s.saving):
        return None
    fig, (ax,) = _figure(1, width=6.0)
    for i, run in enumerate(runs):
        _line(ax, run.steps, lambda s: s.saving, color=_color(i), label=_label(runs, run))
    ax.set_title("prefix-tree saving (tokens / unique tokens)")
    ax.set_ylabel("×")
    _axes_x(ax, "step")
    _legend(ax)
    return fig


SPLIT: list[tuple[str, Getter]] = [
    ("take", lambda s: max((s.take_s or 0.0) - (s.wait_s or 0.0), 0.0)),
    ("wait", lambda s: s.wait_s or 0.0),
    ("train", lambda s: s.train_s or 0.0),
    ("sync", lambda s: s.sync_s or 0.0),
]
"""The bands of the time split, stacked in this order (waiting is the part of taking spent idle)."""


def time_split(runs: list[RunMetrics]) -> Any:
    if not any(_has(runs, "steps", lambda s, f=f: getattr(s, f)) for f in ("take_s", "train_s", "sync_s")):
        return None
    fig, axes = _figure(len(runs), width=5.0)
    for ax, run in zip(axes, runs):
        if run.steps:
            ax.stackplot([s.step for s in run.steps], *[[get(s) for s in run.steps] for _, get in SPLIT],
                         labels=[name for name, _ in SPLIT], colors=[_color(j) for j in range(len(SPLIT))], alpha=0.85)
        ax.set_title(f"time split per step{f': {run.name}' if len(runs) > 1 else ''}")
        ax.set_ylabel("seconds")
        _axes_x(ax, "step")
        _legend(ax)
    return fig


def suite_success(runs: list[RunMetrics]) -> Any:
    suites = sorted({s for run in runs for s in run.suites})
    if len(suites) < 2:
        return None
    fig, axes = _figure(len(suites), width=4.0)
    for ax, suite in zip(axes, suites):
        for i, run in enumerate(runs):
            _line(ax, run.steps, lambda s: s.success_by_suite.get(suite), color=_color(i), label=_label(runs, run, "train"))
            _line(ax, run.heldout, lambda e: e.success_by_suite.get(suite), color=_color(i), marker="o", linestyle="--",
                  markersize=4, label=_label(runs, run, "held-out"))
        ax.set_title(f"success: {suite}")
        ax.set_ylim(-0.05, 1.05)
        _axes_x(ax, "step")
        _legend(ax)
    return fig


def summary_figure(header: list[str], rows: list[list[str]], title: str) -> Any:
    """The summary table as a figure (summary.png)."""
    fig, (ax,) = _figure(1, width=3.0 + 3.4 * (len(header) - 1), height=0.6 + 0.26 * (len(rows) + 1))
    ax.axis("off")
    ax.set_title(title, loc="left", fontsize="medium")
    tab = ax.table(cellText=rows, colLabels=header, cellLoc="left", colLoc="left", bbox=[0, 0, 1, 1],
                   colWidths=[0.9] + [1.1] * (len(header) - 1))
    tab.auto_set_font_size(False)
    tab.set_fontsize(8)
    return fig


PLOTS: list[tuple[str, Callable[[list[RunMetrics]], Any]]] = [
    ("reward", reward),
    ("success", success),
    ("reward_components", reward_components),
    ("throughput", throughput),
    ("offpolicy_age", offpolicy_age),
    ("prefix_saving", prefix_saving),
    ("time_split", time_split),
    ("suite_success", suite_success),
]
"""(file stem, figure) for every plot of ``forge report``; ``None`` from a figure: no data for it."""


def save(fig: Any, path: Path, dpi: int) -> Path:
    """Write ``fig`` as a PNG at ``dpi`` and free it."""
    fig.savefig(path, dpi=dpi, format="png")
    fig.clear()
    return path


def draw_all(runs: list[RunMetrics], out: Path, dpi: int) -> list[Path]:
    """Every figure of :data:`PLOTS` that has data, written into ``out`` as ``STEM.png``."""
    written = []
    for stem, make in PLOTS:
        fig = make(runs)
        if fig is not None:
            written.append(save(fig, out / f"{stem}.png", dpi))
    return written

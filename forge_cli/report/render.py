"""``forge report``: :func:`write_report` reads one or several runs' metrics and writes their plots
and one-page summary into a folder.

The folder is ``RUN/report/`` for one run; for several, the first run's
``report/compare-RUN2[-RUN3…]/`` (overlaid on the same axes, the legend naming the runs); ``out``
chooses another. It holds one PNG per figure of :data:`~forge_cli.report.plots.PLOTS` that has
data, ``summary.png``, ``summary.md`` and ``summary.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_cli.errors import ForgeError
from forge_cli.report.metrics import read_metrics
from forge_cli.report.plots import draw_all, save, summary_figure
from forge_cli.report.summary import Summary, as_dict, markdown, summarize_run, table
from forge_cli.runs import resolve_run

DEFAULT_DPI = 110


@dataclass(frozen=True)
class Report:
    """What :func:`write_report` wrote: the folder, its files and each run's summary."""

    out: Path
    files: list[Path]
    summaries: list[Summary]


def default_out(run_dirs: list[Path]) -> Path:
    """``RUN/report`` for one run; ``RUN1/report/compare-RUN2[-RUN3…]`` for several."""
    base = run_dirs[0] / "report"
    if len(run_dirs) == 1:
        return base
    return base / ("compare-" + "-".join(p.name for p in run_dirs[1:]))


def write_report(config: Any, runs: list[str], *, out: Path | None = None, dpi: int = DEFAULT_DPI) -> Report:
    """Read each run (a name under ``run.dir`` or a run folder's path), write its plots — the runs
    overlaid when there are several — and the summary into ``out`` (default :func:`default_out`)."""
    if not runs:
        raise ForgeError("name at least one run to report on (forge runs lists them)")
    if dpi < 10 or dpi > 1200:
        raise ForgeError(f"--dpi must be between 10 and 1200, got {dpi}")
    run_dirs = [resolve_run(config, r) for r in runs]
    names = _names(run_dirs)
    metrics = [read_metrics(d, name) for d, name in zip(run_dirs, names)]
    out = Path(out) if out is not None else default_out(run_dirs)
    out.mkdir(parents=True, exist_ok=True)
    summaries = [summarize_run(m) for m in metrics]
    files = draw_all(metrics, out, dpi)
    header, rows = table(summaries)
    files.append(save(summary_figure(header, rows, f"Forge report: {', '.join(names)}"), out / "summary.png", dpi))
    (out / "summary.md").write_text(markdown(summaries))
    (out / "summary.json").write_text(json.dumps([as_dict(s) for s in summaries], indent=2) + "\n")
    files += [out / "summary.md", out / "summary.json"]
    return Report(out=out, files=files, summaries=summaries)


def _names(run_dirs: list[Path]) -> list[str]:
    """The legend's name of each run: its folder's name, made unique with its parent's where two share one."""
    names = [p.name for p in run_dirs]
    if len(set(p.resolve() for p in run_dirs)) < len(run_dirs):
        raise ForgeError(f"a run is named twice: {', '.join(map(str, run_dirs))}")
    return [f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name for p in run_dirs]

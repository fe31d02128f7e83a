"""``forge report RUN [RUN2 …]``: a thin caller of :func:`forge_cli.report.render.write_report`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from forge_cli.commands._common import get_state, print_json
from forge_cli.console import console
from forge_cli.report.render import DEFAULT_DPI, write_report
from forge_cli.report.summary import FIELDS_TITLE, as_dict, field_table, table


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report_command(
        runs: list[str] = typer.Argument(..., metavar="RUN", help="Run names (under run.dir) or run folders; several are overlaid on the same axes."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", metavar="DIR",
                                           help="Folder for the plots and summary (default RUN/report; several runs: RUN1/report/compare-RUN2[-RUN3…])."),
        dpi: int = typer.Option(DEFAULT_DPI, "--dpi", help="Resolution of the PNGs (10-1200)."),
        as_json: bool = typer.Option(False, "--json", help="Print the summary figures as JSON instead of a table."),
    ) -> None:
        """Plot a training run (reward, success, per-component rewards, throughput, off-policy age, prefix
        saving, time split, per-suite success) into PNGs and write a one-page summary (summary.md,
        summary.png, summary.json), printed here too."""
        report = write_report(get_state().config(), runs, out=out, dpi=dpi)
        if as_json:
            print_json({"out": str(report.out), "files": [str(f) for f in report.files],
                        "runs": [as_dict(s) for s in report.summaries]})
            return
        for title, (header, rows) in (("Forge report", table(report.summaries)),
                                      (FIELDS_TITLE, field_table(report.summaries))):
            view = Table(title=title, title_justify="left")
            for i, name in enumerate(header):
                view.add_column(name, style="bold" if i == 0 else None, no_wrap=i == 0)
            for row in rows:
                view.add_row(*row)
            console.print(view)
        console.print(f"{len(report.files)} files in {report.out}", highlight=False)

"""``forge runs``: a thin caller of :func:`forge_cli.report.status.run_infos`."""

from __future__ import annotations

import time

import typer
from rich.table import Table

from forge_cli.commands._common import get_state, print_json
from forge_cli.console import console
from forge_cli.report.status import run_infos
from forge_cli.report.summary import fmt_duration


def register(app: typer.Typer) -> None:
    @app.command("runs")
    def runs_command(
        as_json: bool = typer.Option(False, "--json", help="Print JSON (one object per run) instead of a table."),
    ) -> None:
        """List the runs under run.dir, newest first: status (running, finished, stopped, failed, or
        killed: resume with `forge train --resume RUN`), steps, policy version, best held-out success,
        wall time, created."""
        config = get_state().config()
        infos = run_infos(config)
        if as_json:
            print_json([info.as_dict() for info in infos])
            return
        if not infos:
            console.print(f"no runs under {config.run.dir}", highlight=False)
            return
        view = Table(title=f"runs in {config.run.dir}", title_justify="left")
        for column in ("name", "status", "steps", "version", "best held-out", "wall time", "created"):
            view.add_column(column)
        colours = {"running": "green", "finished": "blue", "killed": "yellow", "failed": "red"}
        for r in infos:
            status = r.status or "—"
            view.add_row(r.name, f"[{colours[status]}]{status}[/]" if status in colours else status,
                         "—" if r.steps is None else str(r.steps),
                         "—" if r.policy_version is None else str(r.policy_version),
                         "—" if r.best_heldout_success is None else f"{100 * r.best_heldout_success:.1f}%",
                         fmt_duration(r.wall_s), time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created)))
        console.print(view)

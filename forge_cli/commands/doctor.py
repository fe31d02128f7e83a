"""``forge doctor``: one table of what is present and working."""

from __future__ import annotations

import typer
from rich.table import Table

from forge_cli.commands._common import get_state, print_json, registry
from forge_cli.console import console, err_console, error
from forge_cli.doctor import run_checks


def register(app: typer.Typer) -> None:
    @app.command()
    def doctor(
        quick: bool = typer.Option(False, "--quick", help="Only look for packages; do not import them."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Check this machine: torch and its build, vLLM, DeepSpeed, Ray, Docker, bubblewrap, PostgreSQL, plugins.

        Exits 1 only when something the default loop needs is missing or broken.
        """
        config = get_state().config()
        reg = registry()
        with err_console.status("checking (imports run in subprocesses; vLLM takes ~10 s)…"):
            checks = run_checks(config, reg, quick=quick)
        failed = [c for c in checks if c.required and c.ok is False]
        if as_json:
            print_json([c.__dict__ for c in checks])
        else:
            table = Table(title="forge doctor", title_justify="left")
            table.add_column("check", no_wrap=True)
            table.add_column("status", no_wrap=True)
            table.add_column("needed for", no_wrap=True)
            table.add_column("detail")
            for c in checks:
                status = "[green]ok[/]" if c.ok else ("[dim]–[/]" if c.ok is None else ("[red]FAIL[/]" if c.required else "[yellow]missing[/]"))
                table.add_row(c.name, status, "default loop" if c.required else "optional", c.detail)
            console.print(table)
        if failed:
            names = ", ".join(c.name for c in failed)
            raise typer.Exit(1) if as_json else _fail(names)


def _fail(names: str) -> typer.Exit:
    error(f"the default loop needs: {names} (run scripts/setup.sh)")
    return typer.Exit(1)

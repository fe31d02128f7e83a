"""``forge plugins``: what is loaded and what each plugin registered."""

from __future__ import annotations

import typer
from rich.table import Table

from forge_cli.commands._common import print_json, registry
from forge_cli.console import console


def register(app: typer.Typer) -> None:
    @app.command("plugins")
    def plugins_cmd(
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """List loaded plugins, their versions, their hooks and what each registered."""
        reg = registry()
        rows = [
            {
                "name": info.name,
                "version": info.version,
                "builtin": info.builtin,
                "module": info.module,
                "hooks": info.hooks,
                "registered": info.registered,
            }
            for info in reg.plugins.values()
        ]
        if as_json:
            print_json(rows)
            return
        table = Table(title="Forge plugins", title_justify="left")
        for column in ("plugin", "version", "source", "hooks", "registered"):
            table.add_column(column)
        for row in rows:
            registered = "\n".join(f"{kind.replace('_', ' ')}: {', '.join(names)}" for kind, names in row["registered"].items())
            table.add_row(
                row["name"],
                row["version"],
                "built-in" if row["builtin"] else "third-party",
                "\n".join(row["hooks"]),
                registered or "[dim]nothing[/]",
            )
        console.print(table)

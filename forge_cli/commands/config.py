"""``forge config show``: the resolved configuration and where it came from."""

from __future__ import annotations

import typer

from forge_cli.commands._common import get_state, registry
from forge_cli.config import find_config_file
from forge_cli.console import console, err_console


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Inspect the resolved configuration (defaults < forge.toml < FORGE_* env < flags).")
    app.add_typer(group, name="config")

    @group.command("show")
    def show() -> None:
        """Print the resolved configuration as JSON, after validating every plugin section."""
        state = get_state()
        config = state.config()
        source = find_config_file(state.config_path)
        registry().validate_config_sections(config)  # an error names the file, the variable or the --set flag
        err_console.print(f"[dim]config file: {source or 'none (defaults)'}[/]", highlight=False)
        console.print_json(config.to_json())

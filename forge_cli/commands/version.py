"""``forge version``."""

from __future__ import annotations

import platform

import typer

from forge_cli import __version__
from forge_cli.console import console


def register(app: typer.Typer) -> None:
    @app.command()
    def version() -> None:
        """Print Forge's version and the Python it runs on."""
        console.print(f"forge {__version__} (Python {platform.python_version()})", highlight=False)

"""Rich consoles shared by the CLI: results on stdout, errors, warnings and progress on stderr."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

console = Console()
err_console = Console(stderr=True)


def error(message: str) -> None:
    """One red line on stderr, never wrapped (the CLI then exits 1)."""
    err_console.print(f"[bold red]Error:[/] [red]{escape(message)}[/]", soft_wrap=True, highlight=False)


def warn(message: str) -> None:
    """One yellow line on stderr, never wrapped."""
    err_console.print(f"[yellow]Warning: {escape(message)}[/]", soft_wrap=True, highlight=False)

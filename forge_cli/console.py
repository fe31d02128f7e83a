"""Rich consoles shared by the CLI: results on stdout, errors, warnings and progress on stderr."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from forge_cli.errors import one_line

console = Console()
err_console = Console(stderr=True)


def columns_that_fit(widths: dict[str, int], drop_order: tuple[str, ...], available: int) -> list[str]:
    """The columns of a bordered table (header -> its widest cell, in display order) that fit in
    ``available`` characters without wrapping or cutting a cell, dropping those in ``drop_order``
    first to last until the rest fit (each column takes its width, two of padding and a border)."""
    kept = list(widths)
    for header in drop_order:
        if sum(widths[h] + 3 for h in kept) + 1 <= available:
            break
        kept.remove(header)
    return kept


def error(message: str) -> None:
    """One red line on stderr, never wrapped (the CLI then exits 1); line breaks in ``message``
    are folded into spaces."""
    err_console.print(f"[bold red]Error:[/] [red]{escape(one_line(message))}[/]", soft_wrap=True, highlight=False)


def warn(message: str) -> None:
    """One yellow line on stderr, never wrapped; line breaks in ``message`` are folded into spaces."""
    err_console.print(f"[yellow]Warning: {escape(one_line(message))}[/]", soft_wrap=True, highlight=False)

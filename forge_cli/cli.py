"""The ``forge`` command line (Typer + Rich).

Each command lives in one module of :mod:`forge_cli.commands` with a ``register(app)`` function;
plugins add theirs through the ``register_commands`` hook. The global options live in
:mod:`forge_cli.commands._common` (``get_state``). Nothing heavy is imported here or at the top of a
command module: a command imports a heavy module (the gateway, the trainer) inside its function, so
``forge --help`` stays fast.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Optional

import typer
from typer.core import TyperGroup

from forge_cli import __version__, plugins
from forge_cli.commands._common import State, set_state
from forge_cli.config import parse_set_flags
from forge_cli.console import error
from forge_cli.errors import ForgeError

COMMAND_MODULES = ("version", "doctor", "config", "plugins", "scaffold", "pool", "model", "gateway", "rollout", "train", "report", "runs", "sandbox")


class ForgeGroup(TyperGroup):
    """Turns a :class:`ForgeError` from any command into one red line and exit code 1; so too a
    file the user named that cannot be read or written (an ``OSError`` that names its file)."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except ForgeError as exc:
            error(str(exc))
            raise typer.Exit(1) from None
        except OSError as exc:
            if exc.filename is None:  # not about a path: a bug to see in full
                raise
            error(f"{exc.filename}: {exc.strerror or exc}")
            raise typer.Exit(1) from None


def _print_version(value: bool) -> None:
    if value:
        print(f"forge {__version__}")
        raise typer.Exit()


def build_app() -> typer.Typer:
    app = typer.Typer(
        cls=ForgeGroup,
        name="forge",
        help="Forge: train LLM agents with reinforcement learning.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_show_locals=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @app.callback()
    def root(
        config: Optional[Path] = typer.Option(
            None, "--config", "-c", metavar="FILE", help="forge.toml to use (default: ./forge.toml if present).", envvar="FORGE_CONFIG"
        ),
        set_: list[str] = typer.Option(
            [], "--set", "-s", metavar="KEY=VALUE",
            help="Override a config key: --set pool.max_active_groups=32 (repeatable; before the command).",
        ),
        version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version, help="Print the version and exit."),
    ) -> None:

        plugins.flush_warnings()  # plugins that failed to import, once per invocation
        set_state(State(config_path=config, overrides=parse_set_flags(set_)))

    for name in COMMAND_MODULES:
        importlib.import_module(f"forge_cli.commands.{name}").register(app)

    pm, registry = plugins.get_manager_uncollected()
    plugins.add_commands(pm, registry, app)
    return app


def main() -> None:
    build_app()()

"""Helpers shared by command modules."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from forge_cli import plugins
from forge_cli.config import load_config
from forge_cli.console import console
from forge_cli.errors import ForgeError
from forge_cli.plugins import Registry
from forge_cli.rollout.stream import parse_mix


@dataclass
class State:
    """Global options, read by commands through :func:`get_state`."""

    config_path: Optional[Path] = None
    overrides: dict[str, Any] = field(default_factory=dict)
    _config: Any = None

    def config(self) -> Any:
        """The resolved :class:`~forge_cli.config.ForgeConfig` (loaded once)."""
        if self._config is None:
            self._config = load_config(self.config_path, overrides=self.overrides)
        return self._config


_state = State()


def set_state(state: State) -> None:
    """The global options of this invocation (the CLI's callback sets them once)."""
    global _state
    _state = state


def get_state() -> State:
    return _state


def registry() -> Registry:
    """The plugin registry, with any plugin warnings printed once."""
    reg = plugins.get_registry()
    plugins.flush_warnings()
    return reg


def print_json(data: Any) -> None:
    console.print_json(json.dumps(data, default=str))


def config_with(flags: list[tuple[str, str, Any]]) -> Any:
    """The resolved config with each command flag ``(dotted key, flag name, value)`` that was given
    (``None`` = not given) on top, errors naming the flag the user typed."""
    state = get_state()
    overrides, flag_names = dict(state.overrides), {}
    for key, flag, value in flags:
        if value is not None:
            overrides[key], flag_names[key] = value, flag
    return load_config(state.config_path, overrides=overrides, flag_names=flag_names)


def scaffold_flags(scaffold: str | None, scaffold_mix: str | None) -> list[tuple[str, str, Any]]:
    """``--scaffold`` and ``--scaffold-mix`` (rollout, train): a ``--scaffold`` given alone runs that
    scaffold alone, whatever ``rollout.scaffold_mix`` the config has."""
    if scaffold is not None and scaffold_mix is not None:
        raise ForgeError("--scaffold and --scaffold-mix exclude each other: give one")
    mix = parse_mix(scaffold_mix, "--scaffold-mix", "SCAFFOLD", "aider=1,pi=2") if scaffold_mix is not None else (
        {} if scaffold is not None else None)
    return [("rollout.scaffold", "--scaffold", scaffold), ("rollout.scaffold_mix", "--scaffold-mix", mix)]


def engine_flags(model: Any, engine: Any, policy: Any) -> list[tuple[str, str, Any]]:
    """The model/engine flags ``gateway serve`` and ``rollout`` share."""
    return [("model.path", "--model", str(model) if model else None), ("model.engine.type", "--engine", engine),
            ("model.engine.policy", "--policy", policy)]

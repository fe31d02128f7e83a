"""Helpers shared by command modules."""

from __future__ import annotations

import json
from typing import Any

from forge_cli.plugins import Registry


def registry() -> Registry:
    """The plugin registry, with any plugin warnings printed once."""
    from forge_cli import plugins

    reg = plugins.get_registry()
    plugins.flush_warnings()
    return reg


def print_json(data: Any) -> None:
    from forge_cli.console import console

    console.print_json(json.dumps(data, default=str))

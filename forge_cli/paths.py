"""Where Forge keeps things on disk: FORGE_HOME and the data shipped with the package."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def forge_home() -> Path:
    """Forge's own prefix: installed agents, the default model, caches (``$FORGE_HOME``, default ``~/.forge``)."""
    return Path(os.environ.get("FORGE_HOME") or Path.home() / ".forge").expanduser()


def agents_dir() -> Path:
    """Where ``forge scaffold add`` installs black-box agent programs, one folder each."""
    return forge_home() / "agents"


def data_dir(name: str) -> Path:
    """A top-level data folder of the project (``scaffolds`` or ``sandboxes``).

    A wheel carries them as ``forge_cli/_data/<name>``; a source checkout (editable install)
    has them beside the package. Both layouts are found, the wheel's first.
    """
    for candidate in (_PACKAGE_DIR / "_data" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"Forge's data folder '{name}' is missing from {_PACKAGE_DIR}")

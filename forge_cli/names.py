"""The one rule for the names of registered things (scaffolds, tasks, rewards, sandboxes, …)."""

from __future__ import annotations

import re

from forge_cli.errors import ForgeError

NAME_RE = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")


def check_name(kind: str, name: object) -> str:
    """``name`` itself if it is a valid name of a ``kind`` (``scaffold``, ``task suite``, …); else a ForgeError."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ForgeError(f"{kind} name {name!r} is not valid: use lowercase letters, digits, '-' or '_'")
    return name

"""Finding a task suite: a registered one by name, or a user's JSONL file of tasks with its verifier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forge_cli.errors import ForgeError
from forge_cli.plugins import Registry, get_registry
from forge_cli.tasks.types import TaskSuite
from forge_cli.tasks.user import load_user_suite


def task_suite(name: str, registry: Registry | None = None) -> TaskSuite:
    """The registered task suite called ``name``; a ForgeError listing the known suites if there is none."""
    registry = get_registry() if registry is None else registry
    entry = registry.tasks.get(name)
    if entry is None:
        known = ", ".join(sorted(registry.tasks)) or "none"
        raise ForgeError(f"no task suite named {name!r} (registered: {known})")
    return entry.value


def resolve_suite(name: str, verifier: str | None, registry: Any) -> TaskSuite:
    """A registered suite by name, or a JSONL file of tasks with its verifier (``module:function``)."""
    if name.endswith(".jsonl") or Path(name).is_file():
        if not verifier:
            raise ForgeError(f"the task file {name} needs a verifier: --verifier module:function")
        return load_user_suite(Path(name), verifier)
    if verifier:
        raise ForgeError(f"--verifier is for a JSONL task file; the suite {name!r} has its own")
    return task_suite(name, registry)

"""Tasks and verifiers: the ``Task`` record, the ``Verifier`` protocol, built-in suites with
train/held-out splits (DESIGN.md §10). Suites are registered through ``register_tasks``.

The built-in suites (registered by the ``forge:tasks`` plugin, :mod:`forge_cli.builtin.tasks`):
``calc`` (:mod:`.calc`), ``kv-search`` (:mod:`.kvsearch`), ``files`` (:mod:`.files`),
``reasoning`` and ``qa`` (:mod:`.puzzles`). A user's JSONL tasks: :func:`load_user_suite`.
How answers are compared: :mod:`.answers`; how splits are drawn: :mod:`.splits`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from forge_cli.plugins import Registry
    from forge_cli.tasks.types import TaskSuite


def task_suite(name: str, registry: "Registry | None" = None) -> "TaskSuite":
    """The registered task suite called ``name``; a ForgeError listing the known suites if there is none."""
    from forge_cli.errors import ForgeError

    if registry is None:
        from forge_cli.plugins import get_registry

        registry = get_registry()
    entry = registry.tasks.get(name)
    if entry is None:
        known = ", ".join(sorted(registry.tasks)) or "none"
        raise ForgeError(f"no task suite named {name!r} (registered: {known})")
    return entry.value


def load_user_suite(path: "str | Path", verifier_ref: str | None = None, name: str | None = None,
                    description: str | None = None, file_tools: bool | None = None) -> "TaskSuite":
    """A task suite from a JSONL file of tasks (see :mod:`forge_cli.tasks.user`)."""
    from forge_cli.tasks.user import load_user_suite as load

    return load(path, verifier_ref=verifier_ref, name=name, description=description, file_tools=file_tools)

"""Built-in task suites: ``calc`` (and ``calc-1``, its one-operation tasks), ``kv-search``, ``files``,
``reasoning``, ``qa`` and ``swe-mini``.

Registered through ``register_tasks`` exactly like a third party's suites. Building a suite
generates nothing: tasks are made when ``suite.make(split, n, seed)`` is called.
"""

from __future__ import annotations

from typing import Callable

from forge_cli import hookimpl
from forge_cli.tasks.calc import calc_suite
from forge_cli.tasks.files import files_suite
from forge_cli.tasks.kvsearch import kv_search_suite
from forge_cli.tasks.puzzles import qa_suite, reasoning_suite
from forge_cli.tasks.swe_mini import swe_mini_suite
from forge_cli.tasks.types import TaskSuite


def builtin_suites() -> list[TaskSuite]:
    """The built-in suites with their default settings."""
    # calc-1: one operation — what the embedded 1.6M-parameter default learns by RL in minutes on a CPU
    return [calc_suite(), calc_suite(max_ops=1, name="calc-1"), kv_search_suite(), files_suite(), reasoning_suite(), qa_suite(),
            swe_mini_suite()]


@hookimpl
def register_tasks(register: Callable[[TaskSuite], None]) -> None:
    for suite in builtin_suites():
        register(suite)

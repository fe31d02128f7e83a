"""The records every part of a rollout shares about a task (DESIGN.md §10).

A :class:`TaskSuite` (registered with ``register_tasks``) makes :class:`Task` records for a split
from a seed; each task carries what its verifier needs. A scaffold runs a task — a white-box loop
with :meth:`TaskSuite.tools` as its tools, a black-box program in the task's work directory — and
the driver hands the :class:`Transcript` of what happened to the suite's :class:`Verifier`, which
returns an :class:`Outcome`. Nothing here touches token ids or the pool.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Protocol, Sequence, runtime_checkable

from forge_cli.errors import ForgeError
from forge_cli.names import check_name

if TYPE_CHECKING:
    from forge_cli.sandbox.contract import Sandbox
    from forge_cli.specs import Tool

Split = Literal["train", "heldout"]


@dataclass(frozen=True)
class Task:
    """One task. ``prompt`` is what the agent is asked; ``answer`` what the verifier checks against
    (any JSON-able value, or ``None`` when the verifier inspects the work directory); ``files`` are
    written into the trajectory's work directory before the agent starts; ``difficulty`` labels the
    task for measuring data shift (e.g. the number of hops, or ``"easy"``)."""

    id: str
    suite: str
    prompt: str
    split: Split = "train"
    difficulty: str = "1"
    answer: Any = None
    files: dict[str, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Transcript:
    """What an episode left for the verifier: the agent's final answer (``None`` if it gave none),
    the messages of its last context (white-box; ``[]`` for a black-box program) and, for a
    program, its exit code and output."""

    answer: str | None
    messages: Sequence[dict[str, Any]] = ()
    exit_code: int | None = None
    stdout: str = ""


@dataclass(frozen=True)
class Outcome:
    """The verifier's judgement: ``score`` in [0, 1] (1 = solved) and why."""

    score: float
    reason: str = ""

    @property
    def solved(self) -> bool:
        return self.score >= 1.0


@runtime_checkable
class Verifier(Protocol):
    def verify(self, task: Task, workdir: Path, transcript: Transcript) -> Outcome: ...


@runtime_checkable
class SandboxVerifier(Protocol):
    """A verifier that judges by running programs in the trajectory's own sandbox (the tests of a
    coding task). It still has ``verify``, for callers without a sandbox (it opens one itself)."""

    def verify(self, task: Task, workdir: Path, transcript: Transcript) -> Outcome: ...

    async def verify_in(self, task: Task, sandbox: "Sandbox", transcript: Transcript) -> Outcome: ...


async def verify_outcome(verifier: Verifier, task: Task, workdir: Path, transcript: Transcript,
                         sandbox: "Sandbox | None" = None) -> Outcome:
    """The verifier's outcome where it belongs: ``verify_in`` in ``sandbox`` (still open, the agent's
    work in its work directory) when the verifier runs programs and a sandbox is given, else
    ``verify`` in a worker thread (a verifier may block)."""
    if sandbox is not None and isinstance(verifier, SandboxVerifier):
        return await verifier.verify_in(task, sandbox, transcript)
    return await asyncio.to_thread(verifier.verify, task, workdir, transcript)


@dataclass(frozen=True)
class TaskSuite:
    """A named suite of tasks (what ``register_tasks`` registers).

    ``make(split, n, seed)`` returns ``n`` tasks of ``split`` (the same seed gives the same tasks;
    train and held-out never share a task); ``verifier`` judges them; ``tools(task, workdir)`` are
    the tools a white-box loop gets for one task (``()`` for tool-free suites).
    """

    name: str
    description: str
    make: Callable[[Split, int, int], list[Task]]
    verifier: Verifier
    tools: Callable[[Task, Path], Sequence["Tool"]] = lambda task, workdir: ()

    def validate(self) -> None:
        check_name("task suite", self.name)
        if not callable(self.make) or not callable(self.tools):
            raise ForgeError(f"task suite '{self.name}': make and tools must be callable")
        if not isinstance(self.verifier, Verifier):
            raise ForgeError(f"task suite '{self.name}': its verifier has no verify(task, workdir, transcript)")

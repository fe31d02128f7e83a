"""Train and held-out splits drawn from a seed, for every built-in suite.

A task's split is a property of its *content*, not of the seed: :func:`split_of` hashes the suite
name and the task's key (what makes it that task: its expression, its corpus seed and hops, its
question; for ``kv-search`` the entity asked about), and one key in five is held out. So train and held-out never share a task whatever
seeds they are drawn with, and a task has the same id (a digest of its key) in every draw.
:func:`draw` takes tasks from a seeded stream (``random.Random("suite/split/seed")``: the same
seed gives the same tasks, in the same order; ``n`` tasks are a prefix of ``n + 1``), keeping
those of the split and skipping repeats; :func:`pick` does the same over a finite list.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from forge_cli.errors import ForgeError
from forge_cli.tasks.types import Split, Task

SPLITS: tuple[Split, ...] = ("train", "heldout")
HELDOUT_PER_MILLE = 200


@dataclass(frozen=True)
class Draft:
    """A task before it has a split and an id: ``key`` is what makes it this task; ``split_key``
    (``key`` when empty) is what decides its split, for suites where tasks that differ can still
    read alike (two kv-search corpora asked about the same entity: the entity decides)."""

    key: str
    prompt: str
    answer: Any = None
    difficulty: str = "1"
    files: dict[str, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    split_key: str = ""


def digest(suite: str, key: str) -> str:
    return hashlib.sha256(f"{suite}\x00{key}".encode()).hexdigest()


def split_of(suite: str, key: str) -> Split:
    """The split a task with this key belongs to (one in five held out)."""
    return "heldout" if int(digest(suite, key)[:8], 16) % 1000 < HELDOUT_PER_MILLE else "train"


def check_request(suite: str, split: str, n: int) -> None:
    if split not in SPLITS:
        raise ForgeError(f"task suite '{suite}': no split {split!r} (splits: train, heldout)")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ForgeError(f"task suite '{suite}': n must be a whole number >= 0, not {n!r}")


def _task(suite: str, split: Split, draft: Draft) -> Task:
    return Task(id=f"{suite}-{digest(suite, draft.key)[:12]}", suite=suite, prompt=draft.prompt, split=split,
                difficulty=draft.difficulty, answer=draft.answer, files=dict(draft.files), meta=dict(draft.meta))


def rng_for(suite: str, split: str, seed: int) -> random.Random:
    """The seeded stream a split is drawn from (string seeds hash the same in every process)."""
    return random.Random(f"{suite}/{split}/{seed}")


def draw(suite: str, split: Split, n: int, seed: int, generate: Callable[[random.Random], Draft],
         max_tries: int | None = None) -> list[Task]:
    """``n`` distinct tasks of ``split``, generated one by one from the seeded stream."""
    check_request(suite, split, n)
    rng = rng_for(suite, split, seed)
    tasks: list[Task] = []
    seen: set[str] = set()
    tries = max_tries if max_tries is not None else 200 * n + 1000
    for _ in range(tries):
        if len(tasks) == n:
            break
        draft = generate(rng)
        if draft.key in seen or split_of(suite, draft.split_key or draft.key) != split:
            continue
        seen.add(draft.key)
        tasks.append(_task(suite, split, draft))
    if len(tasks) < n:
        raise ForgeError(f"task suite '{suite}': could draw only {len(tasks)} distinct {split} tasks, not {n}")
    return tasks


def pick(suite: str, split: Split, n: int, seed: int, drafts: Iterable[Draft]) -> list[Task]:
    """``n`` tasks of ``split`` from a finite list, in an order shuffled by the seed."""
    check_request(suite, split, n)
    mine = sorted({d.key: d for d in drafts if split_of(suite, d.split_key or d.key) == split}.items())
    if n > len(mine):
        raise ForgeError(f"task suite '{suite}' has only {len(mine)} {split} tasks; {n} were asked for")
    order = [draft for _, draft in mine]
    rng_for(suite, split, seed).shuffle(order)
    return [_task(suite, split, draft) for draft in order[:n]]

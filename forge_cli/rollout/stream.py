"""Which task each group of a rollout runs — a seeded, resumable stream over one suite or a weighted
mix — and in which scaffold (:func:`turns`: a weighted round robin over ``rollout.scaffold_mix``).

Group ``g`` of a stream (``g = 0, 1, …``; a stream may start at any ``first``) runs a task of the
suite drawn for it: with one suite always that one; with a mix (``{"calc": 2.0, "qa": 1.0}``) the
``g``-th draw of ``random.Random("mix/SEED")`` by weight. The ``j``-th group given to a suite gets
that suite's ``j``-th task, and a suite's tasks come in chunks of :data:`CHUNK`: chunk ``c`` is
``suite.make(split, CHUNK, chunk_seed(seed, c))``, chunk 0 with ``seed`` itself. So everything
about group ``g`` follows from ``(seed, g)``: a stream started at ``k`` is the tail of the one
started at 0 (:func:`replay` counts each suite's groups before ``k``), a mixed stream's calc tasks
are a calc-only stream's, and train never meets held-out, since a task's split is a property of
its content (:mod:`forge_cli.tasks.splits`) whatever seed a chunk is drawn with.

A suite with fewer tasks than a chunk (``qa``: a fixed table) gets chunks of all it has, each in
another seeded order. A bounded stream whose groups of a suite all fall in chunk 0 asks that suite
for just those (``make(split, n, seed)``, the first ``n`` tasks of chunk 0 for every suite whose
``n`` tasks are a prefix of ``n + 1``: every built-in and JSONL suite), which is what a short
``forge rollout`` has always run.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Mapping

from forge_cli.errors import ForgeError

if TYPE_CHECKING:
    from forge_cli.tasks.types import Split, Task, TaskSuite

CHUNK = 64  # tasks drawn from a suite at a time (kv-search makes ~90 a second)


def chunk_seed(seed: int, chunk: int) -> int:
    """The seed a suite's ``chunk``-th chunk is drawn with (chunk 0: ``seed`` itself)."""
    if chunk == 0:
        return seed
    return int(hashlib.sha256(f"forge-chunk/{seed}/{chunk}".encode()).hexdigest()[:15], 16)


def check_mix(mix: Mapping[str, float], what: str = "mix") -> dict[str, float]:
    """The mix as a plain dict, refused when a weight is not a number > 0."""
    out: dict[str, float] = {}
    for name, weight in mix.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0 or weight == float("inf"):
            raise ForgeError(f"the {what} weight of {name!r} must be a number > 0, not {weight!r}")
        out[str(name)] = float(weight)
    return out


def parse_mix(text: str, flag: str = "--mix", what: str = "SUITE", example: str = "calc=2,qa=1") -> dict[str, float]:
    """``"calc=2,qa=1"`` (the ``--mix`` flag; ``--scaffold-mix`` with ``what="SCAFFOLD"``) as
    ``{"calc": 2.0, "qa": 1.0}``; a name without ``=WEIGHT`` weighs 1."""
    mix: dict[str, float] = {}
    usage = f"{flag} expects {what}=WEIGHT[,{what}=WEIGHT…] (like {example})"
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, raw = item.partition("=")
        try:
            weight = float(raw) if sep else 1.0
        except ValueError:
            raise ForgeError(f"{usage}, got {item!r}") from None
        if not name.strip():
            raise ForgeError(f"{usage}, got {item!r}")
        mix[name.strip()] = weight
    if not mix:
        raise ForgeError(f"{flag} names no {what.lower()} (like {example})")
    return check_mix(mix)


def choices(weights: Mapping[str, float], seed: int) -> Iterator[str]:
    """The suite of each group in turn: seeded draws by weight (one suite: always it)."""
    names = sorted(weights)
    if len(names) == 1:
        while True:
            yield names[0]
    total = sum(weights[n] for n in names)
    rng = random.Random(f"mix/{seed}")
    while True:
        x, acc = rng.random() * total, 0.0
        for name in names:
            acc += weights[name]
            if x < acc:
                break
        yield name


def turns(weights: Mapping[str, float], first: int = 0) -> Iterator[str]:
    """The scaffold of each group from group ``first`` on, by weight: smooth weighted round robin
    (each turn every name gains its weight, the one furthest ahead is chosen and pays the total back;
    ties go to the first name in order). Any run of groups holds each name in proportion to its
    weight, as nearly as whole groups can — five agents of equal weight: each five groups in a row
    have all five, where independent draws would give all five 4 % of the time — and group ``g``'s
    name follows from ``g`` alone, so a resumed stream goes on where it stopped."""
    names = sorted(weights)
    total = sum(weights[n] for n in names)
    credit = dict.fromkeys(names, 0.0)
    g = 0
    while True:
        for name in names:
            credit[name] += weights[name]
        chosen = max(names, key=lambda n: (credit[n], -names.index(n)))
        credit[chosen] -= total
        if g >= first:
            yield chosen
        g += 1


def replay(weights: Mapping[str, float], seed: int, upto: int) -> dict[str, int]:
    """How many of groups ``0 … upto − 1`` each suite was drawn for."""
    counts = dict.fromkeys(weights, 0)
    draws = choices(weights, seed)
    for _ in range(upto):
        counts[next(draws)] += 1
    return counts


@dataclass
class _Source:
    """One suite's tasks, chunk by chunk."""

    suite: "TaskSuite"
    size: int = 0  # tasks per chunk, found on the first full chunk: CHUNK, or all the suite has
    chunks: dict[int, list["Task"]] = field(default_factory=dict)  # only the one in use is kept

    def chunk(self, split: "Split", seed: int, c: int) -> list["Task"]:
        if c not in self.chunks:
            self.chunks = {c: self._draw(split, chunk_seed(seed, c))}
        return self.chunks[c]

    def _draw(self, split: "Split", seed: int) -> list["Task"]:
        if self.size:
            return list(self.suite.make(split, self.size, seed))[: self.size]
        try:
            tasks = list(self.suite.make(split, CHUNK, seed))[:CHUNK]
        except ForgeError as exc:  # a finite suite: the largest chunk it can give
            error = exc
            low, high = 0, CHUNK - 1  # low works (0 always does), high + 1 does not
            while low < high:
                mid = (low + high + 1) // 2
                try:
                    self.suite.make(split, mid, seed)
                    low = mid
                except ForgeError:
                    high = mid - 1
            if not low:
                raise error
            tasks = list(self.suite.make(split, low, seed))
        if not tasks:
            raise ForgeError(f"task suite '{self.suite.name}' has no {split} tasks")
        self.size = len(tasks)
        return tasks


class TaskStream:
    """The tasks of groups ``first, first + 1, …`` (``count`` of them, or without end), each as
    ``(suite key, task)``; the key is the mix's name for the suite (or the request's suite)."""

    def __init__(self, suites: Mapping[str, "TaskSuite"], weights: Mapping[str, float], split: "Split", seed: int,
                 first: int = 0, count: int | None = None) -> None:
        if not suites or set(suites) != set(weights):
            raise ValueError("a stream needs one weight per suite")
        if first < 0 or (count is not None and count < 0):
            raise ForgeError(f"first_group and groups must be >= 0, got {first} and {count}")
        self.split, self.seed, self.first, self.count = split, seed, first, count
        self.sources = {name: _Source(suite) for name, suite in suites.items()}
        self.weights = dict(weights)
        self.cursor = replay(self.weights, seed, first)  # each suite's next task index
        self.draws = choices(self.weights, seed)
        for _ in range(first):
            next(self.draws)
        self.index = first  # the group index the next task is for
        # a bounded stream that stays in chunk 0 of a suite asks it for just the tasks it needs
        self.prefix: dict[str, list["Task"] | int] = {}
        if count is not None:
            ends = replay(self.weights, seed, first + count)
            self.prefix = {name: end for name, end in ends.items() if end <= CHUNK}

    def __iter__(self) -> "TaskStream":
        return self

    def __next__(self) -> tuple[str, "Task"]:
        if self.count is not None and self.index >= self.first + self.count:
            raise StopIteration
        name = next(self.draws)
        j = self.cursor[name]
        self.cursor[name] += 1
        self.index += 1
        return name, self.task(name, j)

    def task(self, name: str, j: int) -> "Task":
        """Suite ``name``'s ``j``-th task in this stream."""
        source = self.sources[name]
        wanted = self.prefix.get(name)
        if isinstance(wanted, int):
            try:
                tasks = list(source.suite.make(self.split, wanted, self.seed))
            except ForgeError:  # more than a finite suite has: its chunks after all
                tasks = []
            self.prefix[name] = wanted = tasks if len(tasks) == wanted else None  # type: ignore[assignment]
        if isinstance(wanted, list):
            return wanted[j]
        if not source.size:
            source.chunk(self.split, self.seed, 0)  # learns the chunk size
        return source.chunk(self.split, self.seed, j // source.size)[j % source.size]

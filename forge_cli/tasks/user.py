"""A user's own tasks: a JSONL file and, optionally, a verifier reference.

Each non-empty line of the file is a JSON object: ``id`` and ``prompt`` (non-empty strings) are
required; ``answer`` (any JSON value), ``files`` (an object of path → text, written into the work
directory), ``difficulty`` (a string or number) and ``split`` (``"train"`` or ``"heldout"``;
without it the split is drawn from a hash of the id, one in five held out) are optional. A bad
line is a ForgeError naming the file and the line number.

``verifier_ref`` (``"package.module:function"``) names either a function
``verify(task, workdir, transcript)`` returning an :class:`~forge_cli.tasks.types.Outcome`, a
float in [0, 1] or a bool, or an object with such a ``verify`` method; without one, answers are
exact-matched (:class:`~forge_cli.tasks.answers.ExactMatch`). ``make(split, n, seed)`` returns
``n`` tasks of the split in an order shuffled by the seed.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import re
from pathlib import Path
from typing import Any, Callable

from forge_cli.errors import ForgeError
from forge_cli.names import check_name
from forge_cli.tasks.answers import ExactMatch
from forge_cli.tasks.splits import SPLITS, Draft, check_request, rng_for, split_of
from forge_cli.tasks.types import Outcome, Split, Task, TaskSuite, Transcript, Verifier
from forge_cli.tasks.workdir import tools

REF = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
FIELDS = {"id", "prompt", "answer", "files", "difficulty", "split"}


class FunctionVerifier:
    """A user's verifier (a function or an object's ``verify``) whose result is turned into an Outcome."""

    def __init__(self, ref: str, function: Callable[..., Any]) -> None:
        self.ref = ref
        self.function = function

    def verify(self, task: Task, workdir: Path, transcript: Transcript) -> Outcome:
        result = self.function(task, workdir, transcript)
        if isinstance(result, Outcome):
            score = result.score
        elif isinstance(result, bool):
            return Outcome(1.0 if result else 0.0, f"{self.ref} returned {result}")
        elif isinstance(result, (int, float)):
            score = float(result)
            result = Outcome(score, f"{self.ref} returned {score:g}")
        else:
            raise ForgeError(f"verifier {self.ref} returned {type(result).__name__}; "
                             "it must return an Outcome, a float in [0, 1] or a bool")
        if not (isinstance(score, (int, float)) and math.isfinite(score) and 0.0 <= score <= 1.0):
            raise ForgeError(f"verifier {self.ref} gave the score {score!r}; scores are in [0, 1]")
        return result


def resolve_verifier(ref: str) -> Verifier:
    """Import ``module:attr`` and make it a verifier; a ForgeError saying why if it cannot be."""
    if not isinstance(ref, str) or not REF.match(ref):
        raise ForgeError(f"verifier {ref!r} is not a 'package.module:function' reference")
    module_name, _, attr = ref.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except Exception as exc:
        raise ForgeError(f"verifier {ref!r} does not resolve ({type(exc).__name__}: {exc})") from None
    if inspect.isclass(target):
        try:
            target = target()
        except Exception as exc:
            raise ForgeError(f"verifier {ref!r}: the class cannot be made with no arguments ({exc})") from None
    function = getattr(target, "verify", None) if not inspect.isfunction(target) else target
    if not callable(function):
        raise ForgeError(f"verifier {ref!r} is neither a function nor an object with verify(task, workdir, transcript)")
    try:
        inspect.signature(function).bind(None, None, None)
    except TypeError:
        raise ForgeError(f"verifier {ref!r} must take (task, workdir, transcript)") from None
    except ValueError:  # a builtin without a signature: let the call decide
        pass
    return FunctionVerifier(ref, function)


def _fail(path: Path, number: int, message: str) -> ForgeError:
    return ForgeError(f"{path}:{number}: {message}")


def _draft(path: Path, number: int, line: str) -> tuple[Draft, Split | None]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise _fail(path, number, f"not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(record, dict):
        raise _fail(path, number, f"a task is a JSON object, not {type(record).__name__}")
    unknown = sorted(set(record) - FIELDS)
    if unknown:
        raise _fail(path, number, f"unknown field(s) {', '.join(unknown)} (fields: {', '.join(sorted(FIELDS))})")
    for name in ("id", "prompt"):
        if not isinstance(record.get(name), str) or not record[name].strip():
            raise _fail(path, number, f"'{name}' must be a non-empty string")
    files = record.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(k, str) and k and isinstance(v, str) for k, v in files.items()):
        raise _fail(path, number, "'files' must be an object of path -> text")
    for name in files:
        if name.startswith("/") or ".." in Path(name).parts:
            raise _fail(path, number, f"file {name!r} is not a relative path inside the work directory")
    difficulty = record.get("difficulty", "1")
    if isinstance(difficulty, bool) or not isinstance(difficulty, (str, int, float)):
        raise _fail(path, number, "'difficulty' must be a string or a number")
    split = record.get("split")
    if split is not None and split not in SPLITS:
        raise _fail(path, number, f"'split' must be 'train' or 'heldout', not {split!r}")
    draft = Draft(key=record["id"], prompt=record["prompt"], answer=record.get("answer"),
                  difficulty=str(difficulty), files=files, meta={"line": number})
    return draft, split


def read_tasks(path: Path) -> list[tuple[Draft, Split | None]]:
    """The tasks of a JSONL file with their splits (``None``: not given); a ForgeError naming the first bad line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ForgeError(f"cannot read the task file {path}: {type(exc).__name__}: {exc}") from None
    tasks: list[tuple[Draft, Split | None]] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        draft, split = _draft(path, number, line)
        if draft.key in seen:
            raise _fail(path, number, f"the id {draft.key!r} is already used on line {seen[draft.key]}")
        seen[draft.key] = number
        tasks.append((draft, split))
    if not tasks:
        raise ForgeError(f"the task file {path} holds no tasks")
    return tasks


def load_user_suite(path: str | Path, verifier_ref: str | None = None, name: str | None = None,
                    description: str | None = None, file_tools: bool | None = None) -> TaskSuite:
    """A :class:`TaskSuite` from a JSONL file (see the module's docstring); ``name`` defaults to the file's stem.

    Task ids are the file's own ids. The file is read (and the verifier resolved) once, here.
    ``file_tools`` gives white-box loops ``read_file``/``write_file``/``list_files`` in the work
    directory; by default they are given when some task has ``files``.
    """
    path = Path(path)
    default = re.sub(r"[^a-z0-9]+", "-", path.stem.lower()).strip("-")
    suite_name = check_name("task suite", name if name is not None else default)
    rows = read_tasks(path)
    by_split: dict[str, list[Draft]] = {"train": [], "heldout": []}
    for draft, split in rows:
        by_split[split or split_of(suite_name, draft.key)].append(draft)
    verifier: Verifier = resolve_verifier(verifier_ref) if verifier_ref is not None else ExactMatch()

    def make(split: Split, n: int, seed: int) -> list[Task]:
        check_request(suite_name, split, n)
        mine = list(by_split[split])
        if n > len(mine):
            raise ForgeError(f"task suite '{suite_name}' has only {len(mine)} {split} tasks; {n} were asked for")
        rng_for(suite_name, split, seed).shuffle(mine)
        return [Task(id=d.key, suite=suite_name, prompt=d.prompt, split=split, difficulty=d.difficulty,
                     answer=d.answer, files=dict(d.files), meta=dict(d.meta)) for d in mine[:n]]

    with_files = file_tools if file_tools is not None else any(draft.files for draft, _ in rows)
    if with_files:
        return TaskSuite(name=suite_name, description=description or f"{len(rows)} tasks from {path.name}",
                         make=make, verifier=verifier, tools=tools)
    return TaskSuite(name=suite_name, description=description or f"{len(rows)} tasks from {path.name}",
                     make=make, verifier=verifier)

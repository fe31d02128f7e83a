"""``RUN/metrics.jsonl`` read into typed records: one :class:`StepLine`, :class:`EvalLine` or
:class:`WarmstartLine` per line, by its ``kind``.

The dataclasses below are the one table of what a line may hold: a field's annotation says how
its value is checked. A key a line lacks reads as ``None`` (or empty), so a report can be drawn
from an older or partial run; a key the table does not know is ignored. A line without ``kind``
is a train step.

- A truncated *last* line (no final newline, not valid JSON: what a SIGKILL can leave) is skipped;
  any other line that is not a JSON object of the right types is a :class:`ForgeError` naming the
  file and the line.
- A resumed run re-does the steps after its last checkpoint: a line whose ``step`` is not past
  the previous line of its kind replaces the earlier lines of that kind from that step on, so
  the later line of a step wins.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from forge_cli.errors import ForgeError

METRICS_FILE = "metrics.jsonl"
STATE_FILE = "train_state.json"


@dataclass(frozen=True)
class StepLine:
    """One train step (``kind: "step"``)."""

    step: int
    time_s: float | None = None  # wall seconds since the run first began, cumulative across resumes
    policy_version: int | None = None
    groups: int | None = None
    samples: int | None = None
    loss: float | None = None
    mean_ratio: float | None = None
    reward_mean: float | None = None
    rewards: dict[str, float] = field(default_factory=dict)  # component → mean over the step's trajectories
    success: float | None = None
    success_by_suite: dict[str, float] = field(default_factory=dict)
    max_age: float | None = None
    mean_age: float | None = None
    ages: dict[int, int] = field(default_factory=dict)  # off-policy age → samples
    tokens: float | None = None  # of all samples, unmerged
    unique_tokens: float | None = None  # once merged into the prefix tree
    rollout_tokens_per_s: float | None = None
    train_tokens_per_s: float | None = None
    samples_per_s: float | None = None
    take_s: float | None = None
    train_s: float | None = None
    sync_s: float | None = None
    wait_s: float | None = None  # trainer idle, waiting for data (part of take_s)
    difficulty_mean: float | None = None

    @property
    def saving(self) -> float | None:
        """tokens / unique tokens: how much the prefix tree saved."""
        return _ratio(self.tokens, self.unique_tokens)


@dataclass(frozen=True)
class EvalLine:
    """One evaluation (``kind: "eval"``): several samples per held-out task."""

    step: int
    time_s: float | None = None
    policy_version: int | None = None
    split: str | None = None
    success: float | None = None
    success_by_suite: dict[str, float] = field(default_factory=dict)
    reward_mean: float | None = None
    tasks: int | None = None
    samples_per_task: int | None = None


@dataclass(frozen=True)
class WarmstartLine:
    """One line of the warm start (``kind: "warmstart"``): supervised steps, some with a held-out rate."""

    step: int
    time_s: float | None = None
    loss: float | None = None
    tokens: float | None = None
    heldout_success: float | None = None


KINDS: dict[str, type] = {"step": StepLine, "eval": EvalLine, "warmstart": WarmstartLine}


@dataclass
class RunMetrics:
    """What one run wrote: its lines by kind (in step order) and its ``train_state.json``, if any."""

    name: str
    path: Path
    steps: list[StepLine] = field(default_factory=list)
    evals: list[EvalLine] = field(default_factory=list)
    warmstart: list[WarmstartLine] = field(default_factory=list)
    state: dict[str, Any] | None = None

    @property
    def heldout(self) -> list[EvalLine]:
        """The held-out evaluations (a line that names no split counts as held-out)."""
        return [e for e in self.evals if e.split in (None, "heldout")]

    @property
    def suites(self) -> list[str]:
        """Every suite a step or evaluation reported a success for, sorted."""
        return sorted({s for line in (*self.steps, *self.evals) for s in line.success_by_suite})

    @property
    def components(self) -> list[str]:
        """Every reward component a step reported, sorted."""
        return sorted({c for line in self.steps for c in line.rewards})


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


# ---- checking one value by its field's annotation -------------------------------------------------


def _number(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be a number, got {value!r}")
    return value


def _integer(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be an integer, got {value!r}")
    return value


def _required_integer(value: Any) -> int:
    if value is None:
        raise ValueError("is missing")
    return _integer(value)  # type: ignore[return-value]


def _text(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"must be a string, got {value!r}")
    return value


def _mapping(key: Callable[[str], Any], val: Callable[[Any], Any]) -> Callable[[Any], dict]:
    def check(value: Any) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError(f"must be an object, got {value!r}")
        out = {}
        for k, v in value.items():
            try:
                k2 = key(k)
            except ValueError:
                raise ValueError(f"has the key {k!r}, which is not an integer") from None
            if v is not None:
                out[k2] = val(v)
        return out
    return check


CHECKS: dict[str, Callable[[Any], Any]] = {
    "int": _required_integer,
    "int | None": _integer,
    "float | None": _number,
    "str | None": _text,
    "dict[str, float]": _mapping(str, _number),
    "dict[int, int]": _mapping(int, _integer),
}


def parse_line(obj: Any) -> StepLine | EvalLine | WarmstartLine | None:
    """One decoded line as its record (``None``: a kind this table does not know); a
    :class:`ValueError` says what is wrong with it."""
    if not isinstance(obj, dict):
        raise ValueError(f"not a JSON object but {type(obj).__name__}")
    kind = obj.get("kind", "step")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return None
    values = {}
    for f in fields(cls):
        try:
            values[f.name] = CHECKS[f.type](obj.get(f.name))  # type: ignore[index]
        except ValueError as exc:
            raise ValueError(f"{kind} line: '{f.name}' {exc}") from None
    return cls(**values)


def _lines(path: Path) -> list[tuple[int, str]]:
    """The file's lines with their numbers (1-based); a last line with no newline is flagged by
    the caller through :func:`read_metrics`."""
    with path.open("rb") as fh:
        data = fh.read()
    text = data.decode("utf-8", errors="replace")
    return list(enumerate(text.split("\n"), start=1))


def _keep(records: list, record: Any) -> None:
    """Append ``record``, first dropping the earlier records of its kind at or past its step (a resume)."""
    while records and records[-1].step >= record.step:
        records.pop()
    records.append(record)


def read_metrics(run_dir: Path, name: str | None = None) -> RunMetrics:
    """The run's ``metrics.jsonl`` (and ``train_state.json``) as a :class:`RunMetrics`; a
    :class:`ForgeError` when there is none yet or a line is corrupt (naming the file and line)."""
    run_dir = Path(run_dir)
    path = run_dir / METRICS_FILE
    run = RunMetrics(name=name or run_dir.name, path=run_dir, state=read_state(run_dir))
    if not path.is_file():
        raise ForgeError(f"run {run_dir} has no metrics yet ({path} does not exist): train it with `forge train`")
    lines = _lines(path)
    last = len(lines)
    by_kind = {StepLine: run.steps, EvalLine: run.evals, WarmstartLine: run.warmstart}
    seen = 0
    for number, text in lines:
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError as exc:
            if number == last:  # no newline after it: cut short by a kill, skipped
                continue
            raise ForgeError(f"{path} line {number}: not valid JSON ({exc})") from None
        try:
            record = parse_line(obj)
        except ValueError as exc:
            raise ForgeError(f"{path} line {number}: {exc}") from None
        seen += 1
        if record is not None:
            _keep(by_kind[type(record)], record)
    if not seen:
        raise ForgeError(f"run {run_dir} has no metrics yet ({path} is empty)")
    return run


def read_state(run_dir: Path) -> dict[str, Any] | None:
    """``RUN/train_state.json`` as a dict, ``None`` if it is missing or unreadable (a run that
    never trained, or one killed while the file was replaced)."""
    try:
        data = json.loads((Path(run_dir) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def last_line(run_dir: Path, kind: str = "step") -> StepLine | EvalLine | WarmstartLine | None:
    """The last complete, valid line of ``kind`` in the run's metrics (read from the end of the
    file, so a long run costs no more than a short one); ``None`` if there is none."""
    path = Path(run_dir) / METRICS_FILE
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - (1 << 16)))
            tail = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    for text in reversed(tail.split("\n")):
        try:
            record = parse_line(json.loads(text))
        except ValueError:
            continue
        if record is not None and isinstance(record, KINDS[kind]):
            return record
    return None


def finite(values: list[float | None]) -> list[float]:
    """The values that are numbers and finite (what a mean or a plot may use)."""
    return [v for v in values if v is not None and math.isfinite(v)]

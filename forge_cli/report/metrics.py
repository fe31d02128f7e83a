"""``RUN/metrics.jsonl`` read back into its records (:mod:`forge_cli.records.metrics`): one
:class:`~forge_cli.records.metrics.StepMetrics`, :class:`~forge_cli.records.metrics.EvalMetrics` or
:class:`~forge_cli.records.metrics.WarmstartMetrics` per line, by its ``kind``.

The records say how a line is checked and how tolerant reading is (a missing key reads as
``None``, an unknown one is ignored, a line without ``kind`` is a train step). Here, the file:

- A truncated *last* line (no final newline, not valid JSON: what a SIGKILL can leave) is skipped;
  any other line that is not a JSON object of the right types is a :class:`ForgeError` naming the
  file and the line.
- A resumed run re-does the steps after its last checkpoint: a line whose ``step`` is not past
  the previous line of its kind replaces the earlier lines of that kind from that step on, so
  the later line of a step wins.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_cli.errors import ForgeError
from forge_cli.records.metrics import (METRICS_FILE, RECORDS, AnyMetrics, EvalMetrics, StepMetrics, WarmstartMetrics,
                                       parse_line, read_state)


@dataclass
class RunMetrics:
    """What one run wrote: its lines by kind (in step order) and its ``train_state.json`` (empty if none)."""

    name: str
    path: Path
    steps: list[StepMetrics] = field(default_factory=list)
    evals: list[EvalMetrics] = field(default_factory=list)
    warmstart: list[WarmstartMetrics] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def heldout(self) -> list[EvalMetrics]:
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

    def lines(self, kind: str) -> list[Any]:
        """The records of ``kind`` (``step``, ``eval``, ``warmstart``)."""
        return {"step": self.steps, "eval": self.evals, "warmstart": self.warmstart}[kind]


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
        except ForgeError as exc:
            raise ForgeError(f"{path} line {number}: {exc}") from None
        seen += 1
        if record is not None:
            _keep(run.lines(record.kind), record)
    if not seen:
        raise ForgeError(f"run {run_dir} has no metrics yet ({path} is empty)")
    return run


def last_line(run_dir: Path, kind: str = "step") -> AnyMetrics | None:
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
        except (ValueError, ForgeError):
            continue
        if record is not None and isinstance(record, RECORDS[kind]):
            return record
    return None

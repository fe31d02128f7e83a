"""What a training run writes as it goes: ``RUN/metrics.jsonl``, TensorBoard event files and
``RUN/train_state.json``.

``metrics.jsonl`` holds one JSON object per line, one record of :mod:`forge_cli.records.metrics`
each — a train step (:class:`StepMetrics`), a held-out evaluation (:class:`EvalMetrics`) or a
warm-start step (:class:`WarmstartMetrics`) — stamped here with ``time_s``, the wall seconds since
the run first began, counted on across resumes. The same numbers go to TensorBoard under
``KIND/FIELD`` (``KIND/FIELD/KEY`` for a table such as the reward components). A SIGKILL can leave
half a line at the end: it is cut off before a resumed run appends. ``forge report``
(:mod:`forge_cli.report`) reads the file back into the same records.

``train_state.json`` says where the run stands — ``status`` running, finished, stopped or
failed, the step, the policy version, the best held-out success — and is replaced atomically.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator, TypeVar

from forge_cli.records.metrics import METRICS_FILE, STATE_FILE, MetricsRecord, StepMetrics, Window, read_state
from forge_cli.train.prefix_tree import unique_tokens

Record = TypeVar("Record", bound=MetricsRecord)


class MetricsLog:
    """Appends the run's metric lines and mirrors their numbers to TensorBoard."""

    def __init__(self, run_dir: Path, *, tensorboard: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / METRICS_FILE
        self.offset = _cut_partial_line(self.path)  # the time_s the run had reached before
        self.started = time.monotonic()
        self._fh = self.path.open("a")
        self._tb: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # the report extra is not installed: JSONL only
                self._tb = None
            else:
                self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))

    def time_s(self) -> float:
        """Wall seconds since the run first began (across resumes)."""
        return self.offset + time.monotonic() - self.started

    def write(self, record: Record) -> Record:
        """Append ``record``'s line, stamped with the time now, and return the stamped record."""
        record = record.at(round(self.time_s(), 3))
        self._fh.write(json.dumps(record.line(), default=_plain) + "\n")
        self._fh.flush()
        if self._tb is not None:
            for key, value in _scalars(record):
                self._tb.add_scalar(f"{record.kind}/{key}", value, record.step)
            self._tb.flush()
        return record

    def close(self) -> None:
        self._fh.close()
        if self._tb is not None:
            self._tb.close()


@contextlib.contextmanager
def run_log(run_dir: Path) -> Iterator[logging.Logger]:
    """``RUN/log.txt``: what the run did, one timestamped line per event, and the warnings and
    errors any library logged meanwhile (vLLM's among them)."""
    handler = logging.FileHandler(Path(run_dir) / "log.txt")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("forge.train")
    logger.setLevel(logging.INFO)
    logger.propagate = False  # the file only: a console handler would break the live display
    logger.addHandler(handler)
    root = logging.getLogger()
    handler_warn = logging.FileHandler(Path(run_dir) / "log.txt")
    handler_warn.setFormatter(handler.formatter)
    handler_warn.setLevel(logging.WARNING)
    root.addHandler(handler_warn)
    try:
        yield logger
    finally:
        logger.removeHandler(handler)
        root.removeHandler(handler_warn)
        handler.close()
        handler_warn.close()


def write_state(run_dir: Path, **fields: Any) -> dict[str, Any]:
    """Merge ``fields`` into ``RUN/train_state.json`` (replaced atomically) and return the state."""
    path = Path(run_dir) / STATE_FILE
    state = read_state(run_dir)
    state.update(fields, updated_at=time.time())
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state, indent=2, default=_plain))
    os.replace(tmp, path)
    return state


def _cut_partial_line(path: Path) -> float:
    """Drop a last line without its newline (a killed writer's); return the last ``time_s``."""
    if not path.is_file():
        return 0.0
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
        with path.open("r+b") as fh:
            fh.truncate(len(data))
    for raw in reversed(data.splitlines()):
        try:
            return float(json.loads(raw).get("time_s") or 0.0)
        except (ValueError, AttributeError):
            continue
    return 0.0


def _scalars(record: Any, prefix: str = "") -> list[tuple[str, float]]:
    """TensorBoard's (tag, value) of a record's finite numbers, read by attribute (not ``step`` and
    ``time_s``, its axes): a table's or a :class:`Window`'s as ``FIELD/KEY``."""
    out: list[tuple[str, float]] = []
    for f in dataclasses.fields(record):
        if isinstance(record, MetricsRecord) and f.name in ("step", "time_s"):
            continue
        out.extend(_scalar(f"{prefix}{f.name}", getattr(record, f.name)))
    return out


def _scalar(name: str, value: Any) -> list[tuple[str, float]]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)) and math.isfinite(value):
        return [(name, float(value))]
    if isinstance(value, dict):
        return [pair for key, v in value.items() for pair in _scalar(f"{name}/{key}", v)]
    if isinstance(value, Window):
        return _scalars(value, name + "/")
    return []


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")


def suite_of(task_id: str) -> str:
    """The suite a built-in or user task belongs to (task ids are ``SUITE-HASH``)."""
    return task_id.rsplit("-", 1)[0] if "-" in task_id else task_id


def _tokens_by_scaffold(batch: Any, samples: list[Any]) -> dict[str, tuple[int, int]]:
    """scaffold → (tokens, unique tokens of its samples' own prefix tree), when the batch holds the
    groups of more than one scaffold (one: the step's own ``tokens`` / ``unique_tokens`` say it)."""
    scaffold_of = {c.id: t.scaffold for g in batch.groups for t in g.trajectories for c in t.completions}
    mine: dict[str, list[Any]] = {}
    for s in samples:
        mine.setdefault(scaffold_of.get(s.completion_id, "?"), []).append(s)
    if len(mine) < 2:
        return {}
    return {k: (sum(len(s.tokens) for s in v), unique_tokens(v)) for k, v in sorted(mine.items())}


def step_metrics(batch: Any, samples: Any, stats: Any, *, step: int,
                 difficulty: dict[str, float] | None = None) -> StepMetrics:
    """The record of one train step with the figures its batch, samples and step stats give (the
    loop adds the version, times and rates): rewards per component, success in all and per suite,
    the off-policy ages, tokens against the prefix tree's unique tokens, the trained difficulty."""
    trajectories = [(g.task_id, t) for g in batch.groups for t in g.trajectories]
    n = max(len(trajectories), 1)
    components: Counter[str] = Counter()
    for _, t in trajectories:
        components.update(t.rewards)
    solved = [(suite_of(task), t.rewards.get("outcome", 0.0) >= 1.0) for task, t in trajectories]
    by_suite: dict[str, list[bool]] = {}
    for suite, ok in solved:
        by_suite.setdefault(suite, []).append(ok)
    known = [difficulty[g.task_id] for g in batch.groups if difficulty and g.task_id in difficulty]
    by_scaffold = _tokens_by_scaffold(batch, samples.samples)
    return StepMetrics(
        step=step, groups=len(batch.groups), samples=len(samples.samples), trajectories=len(trajectories),
        group_ids=tuple(g.id for g in batch.groups), window=Window(head=batch.head_before, size=batch.window),
        loss=float(stats.loss), mean_ratio=None if stats.mean_ratio is None else float(stats.mean_ratio),
        grad_norm=None if stats.grad_norm is None else float(stats.grad_norm),
        reward_mean=sum(t.reward or 0.0 for _, t in trajectories) / n,
        rewards={k: v / n for k, v in sorted(components.items())},
        success=sum(ok for _, ok in solved) / n,
        success_by_suite={s: sum(v) / len(v) for s, v in sorted(by_suite.items())},
        max_age=samples.max_age, mean_age=samples.mean_age, ages=dict(sorted(Counter(samples.ages).items())),
        tokens=sum(len(s.tokens) for s in samples.samples), unique_tokens=int(stats.packed_tokens),
        output_tokens=int(stats.tokens),
        tokens_by_scaffold={k: float(v[0]) for k, v in by_scaffold.items()},
        unique_tokens_by_scaffold={k: float(v[1]) for k, v in by_scaffold.items()},
        difficulty_mean=sum(known) / len(known) if known else None,
    )

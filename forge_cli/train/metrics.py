"""What a training run writes as it goes: ``RUN/metrics.jsonl``, TensorBoard event files and
``RUN/train_state.json``.

``metrics.jsonl`` holds one JSON object per line — a train step (``kind = "step"``), a held-out
evaluation (``"eval"``) or a warm-start step (``"warmstart"``) — each with its ``step`` and
``time_s``, the wall seconds since the run first began, counted on across resumes. The same
numbers go to TensorBoard under ``KIND/KEY`` (``KIND/KEY/SUB`` for a table such as the reward
components). A SIGKILL can leave half a line at the end: it is cut off before a resumed run
appends. ``forge report`` (:mod:`forge_cli.report`) reads the file back; its line records name
every key.

``train_state.json`` says where the run stands — ``status`` running, finished, stopped or
failed, the step, the policy version, the best held-out success — and is replaced atomically.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Iterator


class MetricsLog:
    """Appends the run's metric lines and mirrors their numbers to TensorBoard."""

    def __init__(self, run_dir: Path, *, tensorboard: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "metrics.jsonl"
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

    def write(self, kind: str, step: int, **fields: Any) -> dict[str, Any]:
        """Append one line and return it."""
        line = {"kind": kind, "step": step, "time_s": round(self.time_s(), 3), **fields}
        self._fh.write(json.dumps(line, default=_plain) + "\n")
        self._fh.flush()
        if self._tb is not None:
            for key, value in _scalars(fields):
                self._tb.add_scalar(f"{kind}/{key}", value, step)
            self._tb.flush()
        return line

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
    path = Path(run_dir) / "train_state.json"
    state = read_state(run_dir)
    state.update(fields, updated_at=time.time())
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state, indent=2, default=_plain))
    os.replace(tmp, path)
    return state


def read_state(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / "train_state.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


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


def _scalars(fields: dict[str, Any], prefix: str = "") -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    for key, value in fields.items():
        name = f"{prefix}{key}"
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and math.isfinite(value):
            out.append((name, float(value)))
        elif isinstance(value, dict):
            out.extend(_scalars(value, name + "/"))
    return out


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")


def suite_of(task_id: str) -> str:
    """The suite a built-in or user task belongs to (task ids are ``SUITE-HASH``)."""
    return task_id.rsplit("-", 1)[0] if "-" in task_id else task_id


def step_fields(batch: Any, samples: Any, stats: Any, *, difficulty: dict[str, float] | None = None) -> dict[str, Any]:
    """The figures of one train step that its batch, samples and step stats give (the loop adds
    the version, times and rates): rewards per component, success in all and per suite, the
    off-policy ages, tokens against the prefix tree's unique tokens, the trained difficulty."""
    from collections import Counter

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
    return {
        "groups": len(batch.groups), "samples": len(samples.samples), "trajectories": len(trajectories),
        "loss": float(stats.loss), "mean_ratio": None if stats.mean_ratio is None else float(stats.mean_ratio),
        "grad_norm": None if stats.grad_norm is None else float(stats.grad_norm),
        "reward_mean": sum(t.reward or 0.0 for _, t in trajectories) / n,
        "rewards": {k: v / n for k, v in sorted(components.items())},
        "success": sum(ok for _, ok in solved) / n,
        "success_by_suite": {s: sum(v) / len(v) for s, v in sorted(by_suite.items())},
        "max_age": samples.max_age, "mean_age": samples.mean_age,
        "ages": {str(a): c for a, c in sorted(Counter(samples.ages).items())},
        "tokens": sum(len(s.tokens) for s in samples.samples), "unique_tokens": int(stats.packed_tokens),
        "output_tokens": int(stats.tokens),
        "window": {"head": batch.head_before, "size": batch.window},
        "difficulty_mean": sum(known) / len(known) if known else None,
    }

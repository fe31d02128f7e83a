"""The lines of ``RUN/metrics.jsonl``, one record per kind: :class:`StepMetrics` (a train step,
``kind: "step"``), :class:`EvalMetrics` (a held-out evaluation, ``"eval"``) and
:class:`WarmstartMetrics` (a warm-start step, ``"warmstart"``); and :func:`read_state` for
``RUN/train_state.json``.

These records are the one table of what a line holds. The training loop builds them, the metrics
writer writes them (:meth:`~MetricsRecord.line`, and mirrors their numbers to TensorBoard), and the
live display, ``forge report`` and the tests read them back (:meth:`~MetricsRecord.from_line`,
:func:`parse_line`), by attribute. Each field's ``doc`` (its metadata) says what it is; a field
marked ``optional`` is written only when it was measured (a warm-start step without an
evaluation has no held-out success); a ``counter`` only grows along a run (a report shows its
last value, not its mean).

Reading is tolerant of the lines older runs wrote: a key a line lacks reads as ``None`` (or
empty), a key no record knows is ignored, a line without ``kind`` is a train step and a kind no
record knows is skipped. A value of the wrong type is a :class:`~forge_cli.errors.ForgeError`
naming the kind and the field (the reader adds the file and the line).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, ClassVar, Union

from forge_cli.errors import ForgeError

METRICS_FILE = "metrics.jsonl"
STATE_FILE = "train_state.json"


def _doc(doc: str, *, optional: bool = False, counter: bool = False, default: Any = None,
         factory: Callable[[], Any] | None = None) -> Any:
    """A record field with its documentation (see the module: ``optional``, ``counter``)."""
    meta = {"doc": doc, "optional": optional, "counter": counter}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Window:
    """Where the scheduler's queue stood when a step took its groups."""

    head: int | None = _doc("the queue index of the oldest group not yet consumed")
    size: int | None = _doc("the window W the scheduler may take from; None: unbounded (∞)")


class MetricsRecord:
    """What every line record shares: its kind, how it is written and how it is read back."""

    kind: ClassVar[str]
    step: int
    time_s: float | None

    def line(self) -> dict[str, Any]:
        """The line as JSON values, ``kind`` first; an ``optional`` field that is ``None`` is left out."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.metadata.get("optional"):
                continue
            out[f.name] = _json_value(value)
        return out

    def at(self, time_s: float) -> Any:
        """This record stamped with its ``time_s``."""
        return replace(self, time_s=time_s)  # type: ignore[type-var]

    @classmethod
    def from_line(cls, obj: dict[str, Any]) -> Any:
        """The record of one decoded line of this kind; a :class:`ForgeError` says what is wrong with it."""
        values = {}
        for f in fields(cls):  # type: ignore[arg-type]
            try:
                values[f.name] = CHECKS[f.type](obj.get(f.name))  # type: ignore[index]
            except ValueError as exc:
                raise ForgeError(f"{cls.kind} line: '{f.name}' {exc}") from None
        return cls(**values)


@dataclass(frozen=True)
class StepMetrics(MetricsRecord):
    """One train step (``kind: "step"``)."""

    kind: ClassVar[str] = "step"
    step: int = _doc("the step's number in the run (counted on across resumes)", counter=True)
    time_s: float | None = _doc("wall seconds since the run first began, cumulative across resumes", counter=True)
    policy_version: int | None = _doc("the version of the weights this step published to the engine", counter=True)
    # what the batch held
    groups: int | None = _doc("groups trained on")
    trajectories: int | None = _doc("trajectories in those groups")
    samples: int | None = _doc("samples (completions) trained on")
    group_ids: tuple[str, ...] = _doc("the ids of the groups trained on", factory=tuple)
    window: Window | None = _doc("where the scheduler's queue stood when the groups were taken")
    # the update
    loss: float | None = _doc("the last optimizer update's loss")
    mean_ratio: float | None = _doc("mean importance ratio (trainer / sampler probability) of the trained tokens")
    grad_norm: float | None = _doc("gradient norm before clipping")
    # what the trajectories scored
    reward_mean: float | None = _doc("mean reward of the trajectories")
    rewards: dict[str, float] = _doc("reward component → its mean over the trajectories", factory=dict)
    success: float | None = _doc("share of the trajectories whose outcome is right")
    success_by_suite: dict[str, float] = _doc("suite → its success share", factory=dict)
    difficulty_mean: float | None = _doc("mean difficulty of the trained tasks whose suite rates one")
    # off-policy ages (trainer version − sampling version)
    max_age: float | None = _doc("the largest off-policy age of the samples")
    mean_age: float | None = _doc("the mean off-policy age of the samples")
    ages: dict[int, int] = _doc("off-policy age → samples", factory=dict)
    # tokens
    tokens: float | None = _doc("tokens of all samples, unmerged")
    unique_tokens: float | None = _doc("tokens once merged into the prefix tree (what was computed)")
    output_tokens: int | None = _doc("sampled (output) tokens trained on")
    tokens_by_scaffold: dict[str, float] = _doc(
        "scaffold → its samples' tokens, unmerged (a step holding several scaffolds' groups)", factory=dict)
    unique_tokens_by_scaffold: dict[str, float] = _doc(
        "scaffold → its samples' tokens once merged into a prefix tree of their own", factory=dict)
    # times (seconds) and rates
    take_s: float | None = _doc("taking the groups from the pool, waiting included")
    wait_s: float | None = _doc("trainer idle, waiting for complete groups (part of take_s)")
    train_s: float | None = _doc("the optimizer updates")
    sync_s: float | None = _doc("weights into the engine and the version published")
    step_s: float | None = _doc("the whole step, from the end of the step before")
    trainer_idle: float | None = _doc("share of step_s the trainer waited for groups")
    engine_idle: float | None = _doc("share of step_s the rollout engine had no request in flight")
    samples_per_s: float | None = _doc("trajectories trained per second of step_s")
    train_tokens_per_s: float | None = _doc("unique tokens trained per second of train_s (all updates)")
    rollout_tokens_per_s: float | None = _doc("tokens the rollouts sampled per second of step_s")

    @property
    def saving(self) -> float | None:
        """tokens / unique tokens: how much the prefix tree saved."""
        return self.tokens / self.unique_tokens if self.tokens is not None and self.unique_tokens else None


@dataclass(frozen=True)
class EvalMetrics(MetricsRecord):
    """One evaluation (``kind: "eval"``): several samples per held-out task."""

    kind: ClassVar[str] = "eval"
    step: int = _doc("the train step after which it ran", counter=True)
    time_s: float | None = _doc("wall seconds since the run first began", counter=True)
    policy_version: int | None = _doc("the version of the weights evaluated", counter=True)
    split: str | None = _doc("the task split evaluated (heldout; none: heldout)")
    success: float | None = _doc("share of the sampled trajectories whose outcome is right")
    success_by_suite: dict[str, float] = _doc("suite → its success share", factory=dict)
    reward_mean: float | None = _doc("mean reward of the sampled trajectories")
    tasks: int | None = _doc("held-out tasks sampled")
    samples_per_task: int | None = _doc("trajectories sampled per task")
    seconds: float | None = _doc("how long the evaluation took")
    solved_seconds: float | None = _doc("mean wall time of the solved trajectories, seconds (what the completion-time reward trains)")
    solved_tool_calls: float | None = _doc("mean tool calls of the solved trajectories")


@dataclass(frozen=True)
class WarmstartMetrics(MetricsRecord):
    """One warm-start step (``kind: "warmstart"``): supervised, some with a held-out evaluation."""

    kind: ClassVar[str] = "warmstart"
    step: int = _doc("the supervised step's number", counter=True)
    time_s: float | None = _doc("wall seconds since the run first began", counter=True)
    loss: float | None = _doc("cross-entropy loss")
    lr: float | None = _doc("the learning rate of the step")
    tokens: float | None = _doc("tokens trained on, unmerged")
    unique_tokens: float | None = _doc("tokens once merged into the prefix tree")
    completions: int | None = _doc("completions of synthetic traces written so far", counter=True)
    learned: int | None = _doc("of them, how many a step has learned", counter=True)
    heldout_success: float | None = _doc("held-out success of the weights after this step", optional=True)
    policy_version: int | None = _doc("the version those weights were served as", optional=True, counter=True)
    solved_seconds: float | None = _doc("mean wall time of the solved held-out trajectories, seconds", optional=True)
    solved_tool_calls: float | None = _doc("mean tool calls of the solved held-out trajectories", optional=True)


RECORDS: dict[str, type[MetricsRecord]] = {r.kind: r for r in (StepMetrics, EvalMetrics, WarmstartMetrics)}
"""kind → its record."""

AnyMetrics = Union[StepMetrics, EvalMetrics, WarmstartMetrics]


def parse_line(obj: Any) -> AnyMetrics | None:
    """One decoded line as its record (``None``: a kind no record knows; no ``kind``: a step); a
    :class:`ForgeError` says what is wrong with it."""
    if not isinstance(obj, dict):
        raise ForgeError(f"not a JSON object but {type(obj).__name__}")
    kind = obj.get("kind", "step")
    cls = RECORDS.get(kind) if isinstance(kind, str) else None
    return None if cls is None else cls.from_line(obj)


def read_state(run_dir: Path) -> dict[str, Any]:
    """``RUN/train_state.json`` as a dict; empty if it is missing or unreadable (a run that never
    trained, or one killed while the file was replaced)."""
    try:
        data = json.loads((Path(run_dir) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def finite(values: list[float | None]) -> list[float]:
    """The values that are numbers and finite (what a mean or a plot may use)."""
    return [v for v in values if v is not None and math.isfinite(v)]


# ---- writing: JSON values -------------------------------------------------------------------------


def _json_value(value: Any) -> Any:
    if isinstance(value, Window):
        return {"head": value.head, "size": value.size}
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    if isinstance(value, tuple):
        return list(value)
    return value


# ---- reading: one value checked by its field's annotation -----------------------------------------


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


def _texts(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"must be a list of strings, got {value!r}")
    return tuple(value)


def _window(value: Any) -> Window | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"must be an object, got {value!r}")
    return Window(head=_integer(value.get("head")), size=_integer(value.get("size")))


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
    "tuple[str, ...]": _texts,
    "Window | None": _window,
}
"""A field's annotation → how a value read from a line is checked (a test checks every field has one)."""

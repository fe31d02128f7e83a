"""The one-page summary of a run: :func:`summarize_run` computes its figures from the metrics lines,
:data:`ROWS` is the one table of how each is labelled and printed (in summary.md, the summary
PNG and the Rich table of ``forge report`` alike).

Definitions (what the tests recompute from the lines):

- ``steps``: the last step line's ``step``; ``wall_s``: the largest ``time_s`` of any line.
- ``warmstart_heldout``: the last warm-start line's ``heldout_success``; ``best_heldout`` and
  ``last_heldout``: the largest and the last held-out evaluation's ``success``.
- ``reward_first`` / ``reward_last``: the mean ``reward_mean`` over the first / last
  ``k = max(1, n // 10)`` of the ``n`` steps (a tenth of the run, smoothing single steps);
  ``success_first`` / ``success_last`` likewise for ``success``.
- throughput: the mean over the steps of ``rollout_tokens_per_s``, ``train_tokens_per_s`` and
  ``samples_per_s``; ``prefix_saving``: Σ ``tokens`` / Σ ``unique_tokens``;
  ``prefix_saving_by_scaffold`` (runs over several scaffolds): per scaffold, Σ ``tokens_by_scaffold``
  / Σ ``unique_tokens_by_scaffold`` over the steps that hold it.
- the time split: over the step time Σ (``take_s`` + ``train_s`` + ``sync_s``), the shares of
  taking data (less the waiting in it), of waiting (``wait_s``, part of ``take_s``: the trainer
  idle), of training and of weight sync; ``idle_fraction`` is the waiting share.
- ``per_field``: every field of every kind of line the run wrote, one figure each
  (:func:`field_figures`), so that the report shows all the loop writes: a counter's last value
  (``step``, ``policy_version``, …), a number's mean over the lines, a table's mean per key, a
  list's mean length, a text's or the window's last value.
"""

from __future__ import annotations

import math
from dataclasses import Field, asdict, dataclass, field, fields
from typing import Any, Callable

from forge_cli.records.metrics import RECORDS, Window, finite
from forge_cli.report.metrics import RunMetrics


@dataclass(frozen=True)
class Summary:
    """The figures of one run (``None`` where the lines do not say)."""

    name: str
    steps: int
    wall_s: float | None
    status: str | None
    warmstart_heldout: float | None
    best_heldout: float | None
    last_heldout: float | None
    reward_first: float | None
    reward_last: float | None
    success_first: float | None
    success_last: float | None
    rollout_tokens_per_s: float | None
    train_tokens_per_s: float | None
    samples_per_s: float | None
    prefix_saving: float | None
    mean_age: float | None
    max_age: float | None
    take_fraction: float | None
    wait_fraction: float | None
    train_fraction: float | None
    sync_fraction: float | None
    per_field: dict[str, dict[str, Any]] = field(default_factory=dict)  # kind → field → figure (field_figures)
    prefix_saving_by_scaffold: dict[str, float] = field(default_factory=dict)

    @property
    def idle_fraction(self) -> float | None:
        """The trainer's idle share of the step time: waiting for data."""
        return self.wait_fraction


def mean(values: list[float | None]) -> float | None:
    """The mean of the finite values, ``None`` if there are none."""
    vals = finite(values)
    return sum(vals) / len(vals) if vals else None


def edge_window(n: int) -> int:
    """How many steps the first / last figures average: a tenth of the run, at least one."""
    return max(1, n // 10)


def _total(values: list[float | None]) -> float | None:
    vals = finite(values)
    return sum(vals) if vals else None


def summarize_run(run: RunMetrics) -> Summary:
    """The summary figures of ``run`` (see the module's docstring for each definition)."""
    steps = run.steps
    k = edge_window(len(steps))
    times = finite([line.time_s for line in (*steps, *run.evals, *run.warmstart)])
    warm = [w.heldout_success for w in run.warmstart if w.heldout_success is not None]
    held = finite([e.success for e in run.heldout])
    last_held = next((e.success for e in reversed(run.heldout) if e.success is not None), None)
    tokens, unique = _total([s.tokens for s in steps]), _total([s.unique_tokens for s in steps])
    take, wait = _total([s.take_s for s in steps]) or 0.0, _total([s.wait_s for s in steps]) or 0.0
    train, sync = _total([s.train_s for s in steps]) or 0.0, _total([s.sync_s for s in steps]) or 0.0
    step_time = take + train + sync
    share = (lambda x: x / step_time) if step_time > 0 else (lambda x: None)
    return Summary(
        name=run.name,
        steps=steps[-1].step if steps else 0,
        wall_s=max(times) if times else None,
        status=(run.state or {}).get("status"),
        warmstart_heldout=warm[-1] if warm else None,
        best_heldout=max(held) if held else None,
        last_heldout=last_held,
        reward_first=mean([s.reward_mean for s in steps[:k]]),
        reward_last=mean([s.reward_mean for s in steps[-k:]]),
        success_first=mean([s.success for s in steps[:k]]),
        success_last=mean([s.success for s in steps[-k:]]),
        rollout_tokens_per_s=mean([s.rollout_tokens_per_s for s in steps]),
        train_tokens_per_s=mean([s.train_tokens_per_s for s in steps]),
        samples_per_s=mean([s.samples_per_s for s in steps]),
        prefix_saving=tokens / unique if tokens is not None and unique else None,
        mean_age=mean([s.mean_age for s in steps]),
        max_age=max(finite([s.max_age for s in steps]), default=None),
        take_fraction=share(max(take - wait, 0.0)),
        wait_fraction=share(wait),
        train_fraction=share(train),
        sync_fraction=share(sync),
        per_field=field_figures(run),
        prefix_saving_by_scaffold=_saving_by_scaffold(steps),
    )


def _saving_by_scaffold(steps: list[Any]) -> dict[str, float]:
    tokens: dict[str, float] = {}
    unique: dict[str, float] = {}
    for s in steps:
        for k, v in s.tokens_by_scaffold.items():
            tokens[k] = tokens.get(k, 0.0) + v
        for k, v in s.unique_tokens_by_scaffold.items():
            unique[k] = unique.get(k, 0.0) + v
    return {k: tokens[k] / unique[k] for k in sorted(tokens) if unique.get(k)}


def field_figures(run: RunMetrics) -> dict[str, dict[str, Any]]:
    """kind → every field of that kind's record → one figure over the run's lines of that kind
    (a kind the run has no line of is left out): see the module's docstring."""
    return {kind: {f.name: _figure(f, [getattr(line, f.name) for line in run.lines(kind)]) for f in fields(record)}
            for kind, record in RECORDS.items() if run.lines(kind)}


def _figure(f: Field, values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    if f.metadata.get("counter") or not present:
        return present[-1] if present else None
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return mean(present)
    if all(isinstance(v, dict) for v in present):
        keys = sorted({k for v in present for k in v})
        return {k: mean([v.get(k) for v in present]) for k in keys}
    if all(isinstance(v, tuple) for v in present):
        return mean([len(v) for v in present if v])  # an older line without the list: none
    return present[-1]


# ---- how each figure is shown: the one table ------------------------------------------------------


def fmt_duration(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``12.3s``; ``—`` for none."""
    if seconds is None or not math.isfinite(seconds):
        return "—"
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(round(seconds)), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _pair(a: float | None, b: float | None, show: Callable[[float | None], str]) -> str:
    return f"{show(a)} → {show(b)}"


def _split(s: Summary) -> str:
    if s.train_fraction is None:
        return "—"
    return (f"take {_pct(s.take_fraction)} · wait {_pct(s.wait_fraction)} · train {_pct(s.train_fraction)} · "
            f"sync {_pct(s.sync_fraction)}")


ROWS: list[tuple[str, Callable[[Summary], str]]] = [
    ("status", lambda s: s.status or "—"),
    ("steps", lambda s: str(s.steps)),
    ("wall time", lambda s: fmt_duration(s.wall_s)),
    ("held-out success: warm start", lambda s: _pct(s.warmstart_heldout)),
    ("held-out success: best / last", lambda s: f"{_pct(s.best_heldout)} / {_pct(s.last_heldout)}"),
    ("mean reward: first → last", lambda s: _pair(s.reward_first, s.reward_last, _num)),
    ("train success: first → last", lambda s: _pair(s.success_first, s.success_last, _pct)),
    ("rollout tokens/s", lambda s: _num(s.rollout_tokens_per_s)),
    ("train tokens/s", lambda s: _num(s.train_tokens_per_s)),
    ("samples/s", lambda s: _num(s.samples_per_s)),
    ("prefix saving (tokens / unique)", lambda s: "—" if s.prefix_saving is None else f"{s.prefix_saving:.2f}×"),
    ("prefix saving per scaffold", lambda s: " · ".join(f"{k} {v:.2f}×" for k, v in s.prefix_saving_by_scaffold.items()) or "—"),
    ("off-policy age: mean / max", lambda s: f"{_num(s.mean_age)} / {_num(s.max_age)}"),
    ("time split", _split),
    ("trainer idle", lambda s: _pct(s.idle_fraction)),
]
"""(label, how the figure is written) for every row of the summary, in order."""


def table(summaries: list[Summary]) -> tuple[list[str], list[list[str]]]:
    """The summary as a header (``figure`` then one column per run) and rows of text."""
    header = ["figure", *(s.name for s in summaries)]
    return header, [[label, *(show(s) for s in summaries)] for label, show in ROWS]


FIELDS_TITLE = "Every field of the lines (counters: the last value; numbers: the mean; tables: the mean per key; lists: the mean length)"


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_num(v)}" for k, v in value.items()) or "—"
    if isinstance(value, Window):
        return f"head {'—' if value.head is None else value.head}, W {value.size or '∞'}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _num(value)
    return "—" if value is None else str(value)


def field_table(summaries: list[Summary]) -> tuple[list[str], list[list[str]]]:
    """:attr:`Summary.per_field` as a header (``field`` then one column per run) and rows, one per
    ``KIND/FIELD`` (TensorBoard's tag) of a kind some run wrote."""
    header = ["field", *(s.name for s in summaries)]
    rows = []
    for kind, record in RECORDS.items():
        if any(kind in s.per_field for s in summaries):
            rows += [[f"{kind}/{f.name}", *(_show(s.per_field[kind][f.name]) if kind in s.per_field else "—"
                                             for s in summaries)] for f in fields(record)]
    return header, rows


def _markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows])


def markdown(summaries: list[Summary]) -> str:
    """summary.md: the summary table, then every field of the lines (:func:`field_table`), in Markdown."""
    lines = [f"# Forge report: {', '.join(s.name for s in summaries)}", "", *_markdown_table(*table(summaries)),
             "", f"## {FIELDS_TITLE}", "", *_markdown_table(*field_table(summaries))]
    return "\n".join(lines) + "\n"


def as_dict(summary: Summary) -> dict[str, Any]:
    """The summary's figures as plain JSON values (``--json``)."""
    return {**asdict(summary), "idle_fraction": summary.idle_fraction}

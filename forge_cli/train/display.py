"""``forge train``'s live view: a Rich renderable fed the loop's events (the records its
``metrics.jsonl`` lines hold, :mod:`forge_cli.records.metrics`), redrawn by :class:`rich.live.Live`."""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table

from forge_cli.records.metrics import EvalMetrics, StepMetrics, WarmstartMetrics


def _num(value: Any, fmt: str = ".3f") -> str:
    return "—" if value is None else format(value, fmt)


def _pct(value: Any) -> str:
    return "—" if value is None else f"{100 * value:.0f} %"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else f"{seconds // 60}:{seconds % 60:02d}"


class TrainDisplay:
    """What the run is doing now: status, step, rewards, success, throughput, ages, ETA."""

    def __init__(self, *, steps: int | None = None, minutes: float | None = None, title: str = "forge train") -> None:
        self.title, self.steps, self.minutes = title, steps, minutes
        self.started = time.monotonic()
        self.status = "starting: engine and gateway"
        self.step: StepMetrics | None = None
        self.eval: EvalMetrics | None = None
        self.warm: WarmstartMetrics | None = None
        self.rollout: dict[str, Any] = {}
        self.step_times: list[float] = []
        self.best: float | None = None

    def update(self, kind: str, event: Any) -> None:
        """One event of the loop: a step's, an evaluation's or a warm-start step's record, or the
        ``rollout``'s live counts and a ``status`` (dicts)."""
        if kind == "step":
            self.step = event
            self.status = "training"
            self.step_times.append(float(event.step_s or 0.0))
        elif kind == "eval":
            self.eval = event
            self.best = max(self.best or 0.0, float(event.success or 0.0))
        elif kind == "warmstart":
            self.warm = event
            self.status = "warm start (supervised)"
            if event.heldout_success is not None:
                self.best = float(event.heldout_success)
        elif kind == "rollout":
            self.rollout = event
        elif kind == "status":
            self.status = str(event.get("status"))

    def eta(self) -> float | None:
        elapsed = time.monotonic() - self.started
        left = [self.minutes * 60 - elapsed] if self.minutes else []
        if self.steps and self.step_times:
            recent = self.step_times[-10:]
            left.append((self.steps - (self.step.step if self.step else 0)) * sum(recent) / len(recent))
        return min(left) if left else None

    def __rich__(self) -> Any:
        s, e, w, r = self.step, self.eval, self.warm, self.rollout
        table = Table(title=self.title, show_header=False, title_justify="left", min_width=60)
        table.add_column(style="bold")
        table.add_column()
        table.add_row("status", self.status)
        step_text = f"{s.step if s else 0}" + (f" / {self.steps}" if self.steps else "")
        version = next((v for v in (s and s.policy_version, w and w.policy_version) if v is not None), 0)
        table.add_row("step · policy version", f"{step_text} · v{version}")
        table.add_row("elapsed · ETA", f"{_duration(time.monotonic() - self.started)} · {_duration(self.eta())}")
        if w:
            table.add_row("warm start", f"step {w.step}, loss {_num(w.loss)}, held-out {_num(w.heldout_success, '.1%')}")
        if s:
            parts = ", ".join(f"{k} {v:+.3f}" for k, v in s.rewards.items())
            table.add_row("reward", f"{_num(s.reward_mean)}  ({parts})")
            by_suite = s.success_by_suite
            extra = "  (" + ", ".join(f"{k} {v:.0%}" for k, v in by_suite.items()) + ")" if len(by_suite) > 1 else ""
            table.add_row("success (train)", _num(s.success, ".1%") + extra)
        table.add_row("success (held-out)", f"{_num(e.success if e else None, '.1%')} at step {e.step if e else '—'}  "
                      f"(best {_num(self.best, '.1%')})" if e or self.best is not None else "—")
        if s:
            table.add_row("samples/s · tokens/s", f"{_num(s.samples_per_s, '.2f')} traj/s · rollout "
                          f"{_num(s.rollout_tokens_per_s, '.0f')} · train {_num(s.train_tokens_per_s, '.0f')}")
            table.add_row("prefix tree", f"{s.tokens or 0} tokens / {s.unique_tokens or 0} unique = "
                          f"{_num(s.saving, '.2f')}×")
            head, size = (s.window.head, s.window.size) if s.window else (None, None)
            table.add_row("window · off-policy age", f"head {'—' if head is None else head}, W {size or '∞'} · "
                          f"mean {_num(s.mean_age, '.2f')}, max {'—' if s.max_age is None else s.max_age}")
            table.add_row("time split", f"wait {_num(s.wait_s, '.2f')} s · train {_num(s.train_s, '.2f')} s · "
                          f"sync {_num(s.sync_s, '.2f')} s")
            table.add_row("idle", f"trainer {_pct(s.trainer_idle)} (waiting for groups) · "
                          f"engine {_pct(s.engine_idle)} (no request in flight)")
        if r:
            table.add_row("rollout", f"{r.get('running', 0)} running, {r.get('finished', 0)} finished, "
                          f"{r.get('solved', 0)} solved")
            if r.get("infra") or r.get("retried"):  # apart from the policy's failures: never trained as a 0
                table.add_row("infrastructure failures", f"{r.get('infra', 0)} · groups dropped (not trained) "
                              f"{r.get('dropped_groups', 0)} · ran again {r.get('retried', 0)}")
        return table

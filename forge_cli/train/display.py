"""``forge train``'s live view: a Rich renderable fed the loop's events (the same fields its
``metrics.jsonl`` lines hold), redrawn by :class:`rich.live.Live`."""

from __future__ import annotations

import time
from typing import Any


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
        self.step: dict[str, Any] = {}
        self.eval: dict[str, Any] = {}
        self.warm: dict[str, Any] = {}
        self.rollout: dict[str, Any] = {}
        self.step_times: list[float] = []
        self.best: float | None = None

    def update(self, kind: str, fields: dict[str, Any]) -> None:
        if kind == "step":
            self.step = fields
            self.status = "training"
            self.step_times.append(float(fields.get("step_s") or 0.0))
        elif kind == "eval":
            self.eval = fields
            self.best = max(self.best or 0.0, float(fields.get("success") or 0.0))
        elif kind == "warmstart":
            self.warm = fields
            self.status = "warm start (supervised)"
            if fields.get("heldout_success") is not None:
                self.best = float(fields["heldout_success"])
        elif kind == "rollout":
            self.rollout = fields
        elif kind == "status":
            self.status = str(fields.get("status"))

    def eta(self) -> float | None:
        elapsed = time.monotonic() - self.started
        left = [self.minutes * 60 - elapsed] if self.minutes else []
        if self.steps and self.step_times:
            recent = self.step_times[-10:]
            left.append((self.steps - int(self.step.get("step", 0))) * sum(recent) / len(recent))
        return min(left) if left else None

    def __rich__(self) -> Any:
        from rich.table import Table

        s, e, w, r = self.step, self.eval, self.warm, self.rollout
        table = Table(title=self.title, show_header=False, title_justify="left", min_width=60)
        table.add_column(style="bold")
        table.add_column()
        table.add_row("status", self.status)
        step_text = f"{s.get('step', 0)}" + (f" / {self.steps}" if self.steps else "")
        table.add_row("step · policy version", f"{step_text} · v{s.get('policy_version', w.get('policy_version', 0))}")
        table.add_row("elapsed · ETA", f"{_duration(time.monotonic() - self.started)} · {_duration(self.eta())}")
        if w:
            table.add_row("warm start", f"step {w.get('step')}, loss {_num(w.get('loss'))}, held-out "
                          f"{_num(w.get('heldout_success'), '.1%')}")
        if s:
            parts = ", ".join(f"{k} {v:+.3f}" for k, v in (s.get("rewards") or {}).items())
            table.add_row("reward", f"{_num(s.get('reward_mean'))}  ({parts})")
            by_suite = s.get("success_by_suite") or {}
            extra = "  (" + ", ".join(f"{k} {v:.0%}" for k, v in by_suite.items()) + ")" if len(by_suite) > 1 else ""
            table.add_row("success (train)", _num(s.get("success"), ".1%") + extra)
        table.add_row("success (held-out)", f"{_num(e.get('success'), '.1%')} at step {e.get('step', '—')}  "
                      f"(best {_num(self.best, '.1%')})" if e or self.best is not None else "—")
        if s:
            table.add_row("samples/s · tokens/s", f"{_num(s.get('samples_per_s'), '.2f')} traj/s · rollout "
                          f"{_num(s.get('rollout_tokens_per_s'), '.0f')} · train {_num(s.get('train_tokens_per_s'), '.0f')}")
            saving = s["tokens"] / s["unique_tokens"] if s.get("unique_tokens") else None
            table.add_row("prefix tree", f"{s.get('tokens', 0)} tokens / {s.get('unique_tokens', 0)} unique = "
                          f"{_num(saving, '.2f')}×")
            window = s.get("window") or {}
            table.add_row("window · off-policy age", f"head {window.get('head', '—')}, W {window.get('size') or '∞'} · "
                          f"mean {_num(s.get('mean_age'), '.2f')}, max {s.get('max_age', 0)}")
            table.add_row("time split", f"wait {_num(s.get('wait_s'), '.2f')} s · train {_num(s.get('train_s'), '.2f')} s · "
                          f"sync {_num(s.get('sync_s'), '.2f')} s")
            table.add_row("idle", f"trainer {_pct(s.get('trainer_idle'))} (waiting for groups) · "
                          f"engine {_pct(s.get('engine_idle'))} (no request in flight)")
        if r:
            table.add_row("rollout", f"{r.get('running', 0)} running, {r.get('finished', 0)} finished, "
                          f"{r.get('solved', 0)} solved")
        return table

"""What benchmarks/learning.py and its speed part (learning_speed.py) share: the forge CLI run on the
repository's forge.toml, a busy core beside a run, a `forge train` run's and an SFT control's figures read
from their metrics, and how the tables print them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Self

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def forge(home: Path, runs: Path, *args: str, sets: dict[str, str] | None = None, log: Path) -> float:
    """Run the forge CLI with the repository's forge.toml; return its wall time in seconds."""
    cmd = [sys.executable, "-m", "forge_cli", "--config", str(ROOT / "forge.toml"), "--set", f"run.dir={runs}"]
    for key, value in (sets or {}).items():
        cmd += ["--set", f"{key}={value}"]
    env = {**os.environ, "FORGE_HOME": str(home)}
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.run(cmd + list(args), env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}); see {log}")
    return time.monotonic() - started


class Hog:
    """Another CPU-bound process on the machine while a run trains (a busy loop on one core)."""

    def __enter__(self) -> Self:
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def read(run_dir: Path) -> Any:
    from forge_cli.report.metrics import read_metrics

    return read_metrics(run_dir)


def rl_row(run_dir: Path) -> dict:
    """before/after/best and how fast a `forge train` run went; its held-out curve."""
    run = read(run_dir)
    evals, steps = run.evals, run.steps
    first = evals[0] if evals and evals[0].step == 0 else None
    last = evals[-1] if evals else None
    rl_s = steps[-1].time_s if steps else 0.0
    row = {"before": first.success if first else None, "after": last.success if last else None,
           "best": max((e.success for e in evals), default=None), "rl_steps": len(steps), "rl_s": rl_s,
           "curve": [[e.step, e.success] for e in evals],
           "solved_seconds": last.solved_seconds if last else None,
           "solved_tool_calls": last.solved_tool_calls if last else None,
           "before_solved_seconds": first.solved_seconds if first else None,
           "before_solved_tool_calls": first.solved_tool_calls if first else None,
           "samples_per_hour": 3600 * sum(s.trajectories for s in steps) / rl_s if rl_s else None}
    row["gain"] = row["after"] - row["before"] if None not in (row["after"], row["before"]) else None
    return row


def control_row(run_dir: Path, before: float | None) -> dict:
    rated = [x for x in read(run_dir).warmstart if x.heldout_success is not None]
    last = rated[-1] if rated else None
    after = last.heldout_success if last else None
    return {"control_after": after, "control_gain": after - before if None not in (after, before) else None,
            "control_steps": len(read(run_dir).warmstart), "control_curve": [[x.step, x.heldout_success] for x in rated],
            "control_solved_seconds": last.solved_seconds if last else None,
            "control_solved_tool_calls": last.solved_tool_calls if last else None}


def shipped_end_lr() -> float:
    """The learning rate the shipped warm start ended with (its recipe's peak × final fraction)."""
    from forge_cli.engine.default_model import shipped_warm_dir

    recipe = json.loads((shipped_warm_dir() / "warmstart.json").read_text())["recipe"]
    return float(recipe["train.warmstart.lr"]) * float(recipe["train.warmstart.final_lr_fraction"])


def reduction(fast: float | None, slow: float | None) -> float | None:
    return 1.0 - fast / slow if fast is not None and slow else None


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def change(reduction: float | None) -> str:
    """A reduction as the signed change it is: 0.25 → "-25.0", -0.08 → "+8.0"."""
    return "—" if reduction is None else f"{-100 * reduction:+.1f}"


def fmt(x: float | None, spec: str) -> str:
    return "—" if x is None else format(x, spec)

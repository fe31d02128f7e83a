"""``forge runs``: :func:`run_infos` lists the runs under ``run.dir`` with their status.

A run's status is:

- ``running`` while a live process holds its lock (``RUN/.lock``, :func:`forge_cli.runs.lock_run`);
- else its ``train_state.json``'s status (``finished``, ``stopped``, ``failed``), except that a
  run whose state still says ``running`` while its lock is free was killed: ``killed`` (resume it
  with ``forge train --resume RUN``);
- ``None`` for a run that never trained (a rollout's or a gateway's run).

Whether the lock is held is read from ``/proc/locks`` (Linux), never by taking it: a probe that
locked the file, however briefly, could make a trainer starting at that moment fail. Elsewhere, a
lock file whose recorded process is alive counts as held.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from forge_cli.records.metrics import read_state
from forge_cli.report.metrics import last_line
from forge_cli.runs import LOCK_FILE, list_runs

STATUSES = ("running", "finished", "stopped", "failed", "killed")


@dataclass(frozen=True)
class RunInfo:
    """One row of ``forge runs``."""

    name: str
    path: str
    status: str | None
    steps: int | None
    policy_version: int | None
    best_heldout_success: float | None
    wall_s: float | None
    created: float  # unix time

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _flock_owners(inode: int) -> set[int] | None:
    """The pids holding an ``flock`` on a file with this inode, per ``/proc/locks``; ``None``
    where the kernel does not say (not Linux)."""
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    owners = set()
    for line in text.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" ("-> " marks a waiter: not a holder)
        if len(parts) >= 6 and parts[1] == "FLOCK":
            try:
                if int(parts[5].rsplit(":", 1)[1]) == inode:
                    owners.add(int(parts[4]))
            except (IndexError, ValueError):
                continue
    return owners


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_held(run_dir: Path) -> bool:
    """Whether a live process holds the run's lock (without taking it)."""
    path = Path(run_dir) / LOCK_FILE
    try:
        st = path.stat()
        recorded = path.read_text().strip()
    except OSError:  # no lock file: a holder that ended cleanly removes it
        return False
    pid = int(recorded) if recorded.isdigit() else None
    owners = _flock_owners(st.st_ino)
    if owners is None:
        return pid is not None and _pid_alive(pid)
    # the inode alone could be another file's on another device: the recorded pid confirms it
    return bool(owners) and (pid is None or pid in owners)


def run_status(run_dir: Path, state: dict[str, Any] | None) -> str | None:
    """``running`` | ``finished`` | ``stopped`` | ``failed`` | ``killed``, or ``None`` (see the module)."""
    if lock_held(run_dir):
        return "running"
    status = (state or {}).get("status")
    if status == "running":
        return "killed"
    return status if status in STATUSES else None


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def run_info(run_dir: Path) -> RunInfo:
    """The row of one run folder: from its ``train_state.json``, else its last metrics line."""
    state = read_state(run_dir)
    s = state or {}
    last = last_line(run_dir)
    steps = _number(s.get("step"))
    version = _number(s.get("policy_version"))
    wall = last.time_s if last is not None else None
    if wall is None and _number(s.get("updated_at")) is not None and _number(s.get("started_at")) is not None:
        wall = s["updated_at"] - s["started_at"]
    started = _number(s.get("started_at"))
    if started is None:
        marker = run_dir / "config.json"
        started = (marker if marker.exists() else run_dir).stat().st_mtime
    return RunInfo(
        name=run_dir.name, path=str(run_dir), status=run_status(run_dir, state),
        steps=int(steps) if steps is not None else (last.step if last is not None else None),
        policy_version=int(version) if version is not None else (last.policy_version if last is not None else None),
        best_heldout_success=_number(s.get("best_heldout_success")), wall_s=wall, created=started)


def run_infos(config: Any) -> list[RunInfo]:
    """Every run under ``run.dir`` (:func:`forge_cli.runs.list_runs`), newest first by creation."""
    return sorted((run_info(p) for p in list_runs(config)), key=lambda r: r.created, reverse=True)

"""Run folders: ``<run.dir>/<name>/`` holds a run's ``config.json``, its SQLite pool, logs and checkpoints.

A run is created and written under its *name* (:func:`new_run`: one plain path component, never
a path); the reading commands also take an existing run folder's path (:func:`resolve_run`).
One process at a time serves a run: it holds the run's lock (:func:`lock_run`) for its life;
:func:`claim_run` creates or continues a run for a server, lock first.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from forge_cli.config import ForgeConfig, describe_config_error, upgrade_saved, write_resolved
from forge_cli.errors import ForgeError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,58}")  # ≤ 59: "run_" + the name is a PostgreSQL schema (≤ 63)
LOCK_FILE = ".lock"


def check_run_name(name: str) -> str:
    """``name`` if it is a plain run name, else a :class:`ForgeError` saying what one is."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ForgeError(
            f"run name {name!r} is not a plain name: use 1-59 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit (a run is created under run.dir; no '/' or '..')"
        )
    return name


def new_run(config: Any, name: str | None = None, *, exist_ok: bool = False) -> Path:
    """Create the run folder ``run.dir/NAME`` and write the resolved configuration into it as
    ``config.json``. ``name`` (default ``run.name``, else a timestamp) must be a plain name
    (:func:`check_run_name`), so a run is never written outside ``run.dir``.

    ``exist_ok`` continues an existing run (its config.json is rewritten); otherwise a non-empty
    folder of that name is an error.
    """
    name = check_run_name(name or config.run.name or time.strftime("%Y%m%d-%H%M%S"))
    run_dir = Path(config.run.dir) / name
    if not exist_ok and run_dir.exists() and any(run_dir.iterdir()):
        raise ForgeError(f"run folder {run_dir} already exists; choose another --name")
    write_resolved(config, run_dir)
    return run_dir


def list_runs(config: Any) -> list[Path]:
    """Run folders under ``run.dir``, newest first."""
    root = Path(config.run.dir)
    if not root.is_dir():
        return []
    runs = [p for p in root.iterdir() if p.is_dir() and ((p / "config.json").exists() or (p / "pool.sqlite").exists())]
    return sorted(runs, key=lambda p: p.stat().st_mtime, reverse=True)


def resolve_run(config: Any, run: str) -> Path:
    """An existing run, for the reading commands: a name under ``run.dir`` first, else the path
    of an existing run folder."""
    candidate = Path(config.run.dir) / run
    if NAME.fullmatch(run) and candidate.is_dir():
        return candidate
    path = Path(run).expanduser()
    if path.is_dir():
        return path
    known = ", ".join(p.name for p in list_runs(config)[:10]) or "none"
    raise ForgeError(f"no run '{run}' (looked for the folder {candidate} and {path}; runs: {known})")


def run_config(config: Any, run_dir: Path) -> Any:
    """The run's own resolved configuration if it wrote one, else the current one."""
    saved = run_dir / "config.json"
    if not saved.is_file():
        return config
    try:
        data = json.loads(saved.read_text())
    except ValueError as exc:
        raise ForgeError(f"{saved}: not valid JSON ({exc})") from None
    try:
        return ForgeConfig.model_validate(upgrade_saved(data))
    except ValidationError as exc:
        raise ForgeError(describe_config_error(exc, lambda _key: str(saved))) from None


# ---- one server per run -------------------------------------------------------------------------


class RunLock:
    """The lock on a run folder, held by one process until :meth:`release` or its exit."""

    def __init__(self, run_dir: Path, fd: int, created: bool = False) -> None:
        self.run_dir = run_dir
        self.path = run_dir / LOCK_FILE
        self.created = created  # by claim_run: the folder was new (or empty)
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the run up (the lock file goes with it); a second call does nothing."""
        if self._fd is not None:
            try:  # while still locked, and only our own file: the run may have been removed and claimed anew
                if os.stat(self.path).st_ino == os.fstat(self._fd).st_ino:
                    self.path.unlink()
            except FileNotFoundError:
                pass
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_run(run_dir: Path) -> RunLock:
    """Take the run's lock (``RUN/.lock``) for this process: a second server on the run — in this
    process or another — gets a :class:`ForgeError` naming the holder's pid.

    The lock is an ``flock`` on the file: the kernel drops it when the process ends, however it
    ends, so a killed server never leaves its run locked. It is not inherited by child processes.
    """
    run_dir = Path(run_dir)
    path = run_dir / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip()
            os.close(fd)
            who = f"process {holder}" if holder.isdigit() else "another process"
            raise ForgeError(f"run {run_dir} is already being served by {who} (it holds {path}); "
                             "stop it or choose another --run") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:  # not a file its last holder removed while we waited to lock it
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return RunLock(run_dir, fd)


def claim_run(config: Any, name: str | None = None) -> RunLock:
    """Create or continue the run ``run.dir/NAME`` for a server (``name`` as for :func:`new_run`):
    take its lock first, then write ``config.json``, so a second server on the run is refused
    (a :class:`ForgeError` naming the holder) before it changes anything. The lock's ``created``
    says whether the folder was new or empty.
    """
    name = check_run_name(name or config.run.name or time.strftime("%Y%m%d-%H%M%S"))
    run_dir = Path(config.run.dir) / name
    created = not run_dir.is_dir() or not any(run_dir.iterdir())
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = lock_run(run_dir)
    lock.created = created
    try:
        write_resolved(config, run_dir)
    except BaseException:
        lock.release()
        raise
    return lock

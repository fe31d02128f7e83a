"""Run folders: ``<run.dir>/<name>/`` holds a run's ``config.json``, its SQLite pool, logs and checkpoints."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from forge_cli.errors import ForgeError


def new_run(config: Any, name: str | None = None, *, exist_ok: bool = False) -> Path:
    """Create a run folder and write the resolved configuration into it as ``config.json``.

    ``exist_ok`` continues an existing run (its config.json is rewritten); otherwise a non-empty
    folder of that name is an error.
    """
    from forge_cli.config import write_resolved

    name = name or config.run.name or time.strftime("%Y%m%d-%H%M%S")
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
    """A run given by name (under ``run.dir``) or by path."""
    path = Path(run)
    if path.is_dir():
        return path
    candidate = Path(config.run.dir) / run
    if candidate.is_dir():
        return candidate
    known = ", ".join(p.name for p in list_runs(config)[:10]) or "none"
    raise ForgeError(f"no run '{run}' (looked for the folder {run} and {candidate}; runs: {known})")


def run_config(config: Any, run_dir: Path) -> Any:
    """The run's own resolved configuration if it wrote one, else the current one."""
    from forge_cli.config import ForgeConfig

    saved = run_dir / "config.json"
    if saved.is_file():
        try:
            return ForgeConfig.model_validate(json.loads(saved.read_text()))
        except ValueError as exc:
            raise ForgeError(f"{saved}: not a valid Forge config ({exc})") from None
    return config

"""``[run]``: where a run's folder is and its seed."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from forge_cli.configs.common import Section


class RunConfig(Section):
    """Where runs are written: each run gets ``<dir>/<name>/`` with ``config.json`` inside."""

    dir: Path = Field(Path("runs"), description="Folder that holds one sub-folder per run.")
    name: str | None = Field(None, description="Run name; default is a timestamp.")
    seed: int = Field(0, ge=0, description="Seed for every random generator of a run.")

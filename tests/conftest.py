from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_PLUGIN = ROOT / "plugins" / "forge-scaffold-example"


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Every test gets its own FORGE_HOME and working folder, and a fresh plugin registry."""
    from forge_cli import plugins

    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "forge-home"))
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("FORGE_") and name not in ("FORGE_HOME",):
            monkeypatch.delenv(name)
    plugins.reset()
    yield
    plugins.reset()


class Cli:
    """Runs the ``forge`` app in-process (Typer's runner), rebuilding it per call."""

    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: str, env: dict[str, str] | None = None):
        from forge_cli import plugins
        from forge_cli.cli import build_app

        plugins.reset()
        app = build_app()
        return self.runner.invoke(app, list(args), env=env, catch_exceptions=False)


@pytest.fixture
def cli() -> Cli:
    return Cli()


@pytest.fixture
def fake_dist(tmp_path, monkeypatch):
    """Make a distribution with ``forge`` entry points importable, without pip: a dist-info folder on sys.path."""

    def make(dist: str, modules: dict[str, str], entry_points: dict[str, str], version: str = "0.1") -> Path:
        site = tmp_path / f"site-{dist}"
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        eps = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
        (info / "entry_points.txt").write_text(f"[forge]\n{eps}")
        for module, source in modules.items():
            (site / f"{module}.py").write_text(source)
        monkeypatch.syspath_prepend(str(site))
        for module in modules:
            sys.modules.pop(module, None)
        return site

    return make

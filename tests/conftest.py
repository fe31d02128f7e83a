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


# ---- a real PostgreSQL server for the pool tests ---------------------------------------------------


@pytest.fixture(scope="session")
def pg_url():
    """A throwaway PostgreSQL cluster on 127.0.0.1, started for this test session."""
    from forge_cli.pool.local_pg import server_bindir, throwaway_postgres

    if server_bindir() is None:
        message = "PostgreSQL server binaries are missing (scripts/system-deps.sh installs them)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with throwaway_postgres() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def pool_spec(request, tmp_path):
    """How to open one fresh pool, on each backend: ('sqlite', path) or ('postgres', url, schema)."""
    import uuid

    if request.param == "sqlite":
        return ("sqlite", str(tmp_path / "pool.sqlite"))
    url = request.getfixturevalue("pg_url")
    return ("postgres", url, f"t_{uuid.uuid4().hex[:12]}")


def open_spec(spec, **kw):
    from forge_cli.pool import DataPool

    if spec[0] == "sqlite":
        return DataPool.sqlite(spec[1], **kw)
    return DataPool.postgres(spec[1], spec[2], **kw)


@pytest.fixture
def pool(pool_spec):
    p = open_spec(pool_spec)
    yield p
    p.close()

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent

# Property tests draw fresh random inputs on every run; CI (``.ci/run``) sets
# FORGE_HYPOTHESIS_PROFILE=ci so that its draws are reproducible and a red CI can be replayed.
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("FORGE_HYPOTHESIS_PROFILE", "default"))
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
    from forge_cli.pool.store import DataPool

    if spec[0] == "sqlite":
        return DataPool.sqlite(spec[1], **kw)
    return DataPool.postgres(spec[1], spec[2], **kw)


@pytest.fixture
def pool(pool_spec):
    p = open_spec(pool_spec)
    yield p
    p.close()


# ---- real black-box agents, installed once per test session ------------------------------------------------


@pytest.fixture(scope="session")
def agents_home(tmp_path_factory):
    """A FORGE_HOME whose agents (``forge scaffold add``, from PyPI) are installed once for the whole session."""
    return tmp_path_factory.mktemp("forge-home-agents")


@pytest.fixture
def installed_agent(agents_home, monkeypatch):
    """``installed_agent(name)``: the scaffold, installed (idempotently) under the session's agents FORGE_HOME,
    which this test then uses."""
    from forge_cli import installer, plugins

    monkeypatch.setenv("FORGE_HOME", str(agents_home))

    def install(name: str):
        spec = plugins.get_registry().scaffold(name)
        installer.install_agent(spec)
        return spec

    return install


@pytest.fixture
def local_sandbox() -> None:
    """Skips a test of the local sandbox's bubblewrap isolation where bubblewrap does not work."""
    from forge_cli.sandbox.bwrap import unavailable

    if (problem := unavailable()) is not None:
        pytest.skip(f"no bubblewrap sandbox here ({problem}; scripts/system-deps.sh installs it)")


# ---- a model and a live gateway ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """The default tiny policy, built once per test session."""
    from forge_cli.engine.default_model import init_default_model

    return init_default_model(tmp_path_factory.mktemp("model") / "tiny", size="tiny", seed=0)


@pytest.fixture(scope="session")
def scoring_model(tmp_path_factory):
    """The default model at size ``scoring`` (the tiny policy's tokenizer and chat template over a 1-layer,
    1-head Llama with 65,536 positions): for tests where a scripted policy writes the text and the model
    only scores it. Real agents send 10-30k-token prompts; this model scores one ~16 times faster than the
    tiny policy (attention is most of the cost), and its logprobs are a real model's all the same."""
    from forge_cli.engine.default_model import init_default_model

    return init_default_model(tmp_path_factory.mktemp("model") / "scoring", size="scoring", seed=0)


class LiveGateway:
    """A gateway served by uvicorn on a free loopback port, in a background thread (``app``: serve
    that app instead of the gateway's own)."""

    def __init__(self, state, app=None) -> None:
        import socket
        import threading

        import uvicorn

        from forge_cli.gateway.app import create_app

        self.state = state
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app or create_app(state), host="127.0.0.1", port=self.port, log_level="critical"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started or not self.thread.is_alive(), what="the gateway to start")
        assert self.server.started, "the gateway did not start"

    def openai(self, key: str = "test-key", **kw):
        from openai import OpenAI

        return OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, **kw)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def tool_formats():
    from forge_cli import plugins

    return {name: e.value for name, e in plugins.get_registry().tool_formats.items()}


# modules whose tests hold machine-wide things (the Docker engine's containers, a Ray cluster, real agents
# at full tilt): under pytest-xdist (`make test` runs two workers) they run one after another on one worker
HEAVY_MODULES = frozenset({
    "test_agents_more", "test_agents_npm", "test_agents_pip", "test_hostile_agent", "test_mcp_tools", "test_reward_hacking",
    "test_sandbox_docker", "test_sandbox_escape_docker", "test_rollout_cli", "test_scaling_examples",
})


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scope scheduling with one scope for every HEAVY_MODULES test (one worker runs them
    in order) and one per test elsewhere (any worker). (xdist's own ``loadgroup`` does not group under
    pytest 9.2, whose node ids it can no longer rename.)"""
    from xdist.scheduler import LoadScopeScheduling

    class HeavyTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0].rpartition("/")[2].removesuffix(".py")
            return "heavy" if module in HEAVY_MODULES else nodeid

    return HeavyTogether(config, log)


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.gpu`` tests run only where a CUDA device exists."""
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

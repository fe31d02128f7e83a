"""Installing: the wheel into a fresh venv, the example plugin by path, a black-box agent from npm.

These run the real tools (uv, pip, npm, venv) against the package registries and are marked slow.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_PLUGIN, ROOT

pytestmark = pytest.mark.slow


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    """Forge built as a wheel (no editable install) and installed into a brand-new venv."""
    base = tmp_path_factory.mktemp("wheel")
    # build from a clean copy of the tracked tree, as a user's `pip install .` of a checkout would
    src = base / "src"
    files = _run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT).stdout.split()
    for rel in files:
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(base / "dist"), str(src)])
    wheel = next((base / "dist").glob("forge_cli-*.whl"))
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)])
    return venv


def _forge(venv: Path, *args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k != "PYTHONPATH"}
    env["FORGE_HOME"] = str(home)
    return subprocess.run([str(venv / "bin" / "forge"), *args], capture_output=True, text=True, env=env, cwd=cwd)


def test_wheel_ships_scaffolds_and_sandboxes(wheel_venv, tmp_path):
    done = _forge(wheel_venv, "scaffold", "list", "--json", home=tmp_path / "home", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    names = {row["name"] for row in json.loads(done.stdout)}
    assert {"truncate-bc", "react", "opencode", "codex", "smolagents"} <= names
    show = _forge(wheel_venv, "scaffold", "show", "smolagents", "--json", home=tmp_path / "home", cwd=tmp_path)
    site = next((wheel_venv / "lib").glob("python3*/site-packages"))
    definition = site / "forge_cli" / "_data" / "scaffolds" / "black" / "smolagents.toml"
    assert definition.is_file()
    assert (site / "forge_cli" / "_data" / "scaffolds" / "runners" / "smolagents_runner.py").is_file()
    assert (site / "forge_cli" / "_data" / "sandboxes").is_dir()
    assert json.loads(show.stdout)["definition"] == str(definition)
    # the installed package, not the checkout, answered
    where = _run([str(wheel_venv / "bin" / "python"), "-c", "import forge_cli; print(forge_cli.__file__)"], cwd=tmp_path)
    assert where.stdout.strip().startswith(str(site))


def test_add_example_plugin_by_path_then_remove(wheel_venv, tmp_path):
    home = tmp_path / "home"
    added = _forge(wheel_venv, "scaffold", "add", str(EXAMPLE_PLUGIN), home=home, cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    assert "installed plugin forge-scaffold-example" in added.stdout
    assert "scaffolds: example-sexpr" in added.stdout and "tool formats: sexpr" in added.stdout
    listed = json.loads(_forge(wheel_venv, "scaffold", "list", "--json", home=home, cwd=tmp_path).stdout)
    row = next(r for r in listed if r["name"] == "example-sexpr")
    assert (row["plugin"], row["tool_format"], row["kind"]) == ("forge-scaffold-example", "sexpr", "white")
    # its [scaffolds.example-sexpr] section reaches it, validated
    (tmp_path / "forge.toml").write_text('[scaffolds.example-sexpr]\npersona = "You are terse."\n')
    shown = _forge(wheel_venv, "scaffold", "show", "example-sexpr", home=home, cwd=tmp_path)
    assert shown.returncode == 0 and "You are terse." in shown.stdout
    # its scaffold points at code that the installed plugin ships
    shown = _forge(wheel_venv, "scaffold", "show", "example-sexpr", "--json", home=home, cwd=tmp_path)
    assert json.loads(shown.stdout)["loop"] == "forge_scaffold_example.loop:SexprLoop (resolves)"
    (tmp_path / "forge.toml").write_text("[scaffolds.example-sexpr]\npersona = 3\n")
    bad = _forge(wheel_venv, "scaffold", "show", "example-sexpr", home=home, cwd=tmp_path)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [
        f"Error: {tmp_path / 'forge.toml'} [scaffolds.example-sexpr]: persona: Input should be a valid string (got 3)"
    ]
    (tmp_path / "forge.toml").unlink()
    kept = _forge(wheel_venv, "scaffold", "remove", "example-sexpr", home=home, cwd=tmp_path)  # a white-box scaffold
    assert kept.returncode == 1 and "--plugin" in kept.stderr
    removed = _forge(wheel_venv, "scaffold", "remove", "example-sexpr", "--plugin", home=home, cwd=tmp_path)
    assert removed.returncode == 0, removed.stderr
    assert "uninstalling the plugin forge-scaffold-example (it registered: scaffolds example-sexpr" in removed.stdout
    listed = json.loads(_forge(wheel_venv, "scaffold", "list", "--json", home=home, cwd=tmp_path).stdout)
    assert "example-sexpr" not in {r["name"] for r in listed}


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_add_opencode_installs_from_npm_into_forge_home(cli, tmp_path):
    home = Path(os.environ["FORGE_HOME"])
    first = cli("scaffold", "add", "opencode")
    assert first.exit_code == 0, first.stderr
    binary = home / "agents" / "opencode" / "node_modules" / ".bin" / "opencode"
    assert "installed opencode 1." in first.stdout and binary.exists()
    version = _run([str(binary), "--version"]).stdout.strip()
    assert version.startswith("1.")
    listed = json.loads(cli("scaffold", "list", "--json").stdout)
    assert next(r for r in listed if r["name"] == "opencode")["installed"] == f"yes ({version})"
    # idempotent: the second add does nothing (the installed binary is not touched)
    made = binary.lstat().st_mtime_ns
    again = cli("scaffold", "add", "opencode")
    assert again.exit_code == 0 and "already installed" in again.stdout
    assert binary.lstat().st_mtime_ns == made
    removed = cli("scaffold", "remove", "opencode")
    assert removed.exit_code == 0 and not (home / "agents" / "opencode").exists()


@pytest.mark.parametrize("tool", ["uv", "pip"])
def test_a_pip_agent_installs_into_a_venv_of_its_own(tool, monkeypatch, tmp_path):
    """uv by default (the dependency beside Forge's Python), pip where FORGE_AGENT_INSTALLER=pip: the
    agent's venv holds its package at the asked version, compiled, with pip in it (agents that install
    more at run time use it); the log says which tool ran."""
    from forge_cli import installer, plugins
    from forge_cli.specs import InstallRecipe

    monkeypatch.setenv("FORGE_AGENT_INSTALLER", tool)
    spec = plugins.get_registry().scaffold("aider")
    six = dataclasses.replace(spec, name="six-agent", install=InstallRecipe("pip", "six", "==1.16.0", "python"))
    done = installer.install_agent(six)
    assert done.fresh and done.version == "1.16.0"
    python = done.prefix / "venv" / "bin" / "python"
    assert _run([str(python), "-c", "import six; print(six.__file__)"]).stdout.strip().startswith(str(done.prefix))
    assert list((done.prefix / "venv").glob("lib/python*/site-packages/__pycache__/six.*.pyc"))
    assert _run([str(python), "-m", "pip", "--version"]).returncode == 0
    ran = (Path(os.environ["FORGE_HOME"]) / "logs" / "install-six-agent.log").read_text().splitlines()[1]
    assert ran.startswith(f"$ {installer.uv_binary()} pip install --python" if tool == "uv" else f"$ {python} -m pip install")
    assert installer.installed(six) is not None and installer.install_agent(six).fresh is False


def test_uv_gets_pips_index_settings_and_pip_can_be_asked_for(monkeypatch):
    from forge_cli import installer

    monkeypatch.delenv("FORGE_AGENT_INSTALLER", raising=False)
    monkeypatch.delenv("UV_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("UV_EXTRA_INDEX_URL", "http://127.0.0.1:9/uv-own")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "http://127.0.0.1:9/pip-extra")
    what, cmd, env = installer.pip_install_command("/venv/bin/python")
    assert what == "uv pip install" and cmd[1:] == ["pip", "install", "--python", "/venv/bin/python", "--compile-bytecode"]
    assert env["UV_INDEX_URL"] == "http://127.0.0.1:9/simple"
    assert env["UV_EXTRA_INDEX_URL"] == "http://127.0.0.1:9/uv-own"  # uv's own setting wins
    monkeypatch.setenv("FORGE_AGENT_INSTALLER", "pip")
    what, cmd, env = installer.pip_install_command("/venv/bin/python")
    assert what == "pip install" and cmd[:4] == ["/venv/bin/python", "-m", "pip", "install"] and "UV_INDEX_URL" not in env


@pytest.mark.parametrize("tool", ["uv", "pip"])
def test_failed_agent_install_leaves_nothing_behind(tool, cli, monkeypatch, tmp_path):
    """A pip agent whose package cannot be installed: one red line with the log, no half install."""
    from forge_cli import installer, plugins
    from forge_cli.specs import InstallRecipe

    monkeypatch.setenv("FORGE_AGENT_INSTALLER", tool)
    spec = plugins.get_registry().scaffold("aider")
    broken = dataclasses.replace(spec, install=InstallRecipe("pip", str(tmp_path / "no-such-dir"), "", "aider"))
    with pytest.raises(Exception) as info:
        installer.install_agent(broken)
    message = str(info.value)
    assert message.startswith(f"{'uv pip' if tool == 'uv' else 'pip'} install failed (exit "), message
    assert "no-such-dir" in message and ("does not exist" in message or "not found" in message.lower()), message
    assert message.endswith(str(Path(os.environ["FORGE_HOME"]) / "logs" / "install-aider.log"))
    assert "no-such-dir" in (Path(os.environ["FORGE_HOME"]) / "logs" / "install-aider.log").read_text()
    assert not installer.agent_prefix("aider").exists()
    assert installer.installed(spec) is None

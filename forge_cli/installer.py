"""Installing things: black-box agents into ``$FORGE_HOME/agents/<name>``, plugin distributions
into the current environment.

Every step streams its output line by line to ``on_line`` (the CLI shows the latest line under
a spinner) and into a log file, so a failure can be reported in one line with the log's path.
An agent install is idempotent: a marker file written last records what was installed, and a
second ``add`` with the same recipe does nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from packaging.requirements import InvalidRequirement, Requirement

from forge_cli.errors import ForgeError
from forge_cli.paths import agents_dir, data_dir, forge_home
from forge_cli.specs import InstallRecipe, ScaffoldSpec

MARKER = ".forge-install.json"
LineSink = Callable[[str], None]


@dataclass(frozen=True)
class AgentInstall:
    """What an installed agent looks like on disk."""

    name: str
    prefix: Path
    requirement: str
    version: str
    bin: Path
    installed_at: float
    fresh: bool = False  # True when this call installed it, False when it was already there


def agent_prefix(name: str) -> Path:
    return agents_dir() / name


def install_log(name: str) -> Path:
    """The log of the latest install of ``name`` (kept outside the prefix, so it survives a failure)."""
    log = forge_home() / "logs" / f"install-{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    return log


def bin_path(recipe: InstallRecipe, prefix: Path) -> Path:
    if recipe.manager == "npm":
        return prefix / "node_modules" / ".bin" / recipe.bin
    return prefix / "venv" / "bin" / recipe.bin


def installed(spec: ScaffoldSpec) -> AgentInstall | None:
    """The recorded install of a black-box scaffold, if it is present and still runnable."""
    if spec.install is None:
        return None
    prefix = agent_prefix(spec.name)
    try:
        data = json.loads((prefix / MARKER).read_text())
    except (OSError, ValueError):
        return None
    binary = Path(data.get("bin", ""))
    if data.get("requirement") != _requirement_key(spec.install) or not binary.exists():
        return None
    return AgentInstall(spec.name, prefix, data["requirement"], data.get("version", "?"), binary, data.get("installed_at", 0))


# what a runner may import (Forge's MCP servers as its library's tools): installed into every pip agent's venv
# (a plugin's runner script may use it too)
RUNNER_MODULE = "forge_runner.py"


def _requirement_key(recipe: InstallRecipe) -> str:
    key = " ".join((recipe.manager, recipe.requirement, *recipe.extra_packages))
    runner = runner_script(recipe)
    if runner is not None:  # an edited runner is a new install
        key += f" runner:{hashlib.sha256(runner.read_bytes()).hexdigest()[:16]}"
    if recipe.manager == "pip":  # and so is an edited module of the runners'
        key += f" {RUNNER_MODULE}:{hashlib.sha256(runner_module().read_bytes()).hexdigest()[:16]}"
    for script in map(Path, recipe.scripts):  # and so is an edited script
        try:
            key += f" {script.name}:{hashlib.sha256(script.read_bytes()).hexdigest()[:16]}"
        except OSError:
            key += f" {script.name}:missing"
    return key


def runner_module() -> Path:
    """:data:`RUNNER_MODULE` in Forge's runners folder."""
    return data_dir("scaffolds") / "runners" / RUNNER_MODULE


def runner_script(recipe: InstallRecipe) -> Path | None:
    """Forge's runner script for a pip agent whose ``bin`` names one (``scaffolds/runners/BIN.py``: a
    small program that drives a library agent, e.g. smolagents), else None. The installer writes it
    into the agent's venv as its program, run by the venv's python, so it is visible wherever the
    agent is (both sandboxes mount ``$FORGE_HOME/agents``)."""
    if recipe.manager != "pip":
        return None

    script = data_dir("scaffolds") / "runners" / f"{recipe.bin}.py"
    return script if script.is_file() else None


def run_streamed(
    what: str, cmd: list[str], log: Path, on_line: LineSink | None, env: dict[str, str] | None = None
) -> None:
    """Run ``cmd``, append its output to ``log``, pass each line to ``on_line``.

    On failure: a ForgeError saying ``what`` failed, with what it said last (from its last line that
    starts with ``error``, which uv may wrap over several, else its last line) and the log's path.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    last, said = "", []
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        try:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, bufsize=1
            )
        except FileNotFoundError:
            raise ForgeError(f"'{cmd[0]}' was not found on PATH") from None
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            line = line.strip()
            if line:
                last = line
                if line.lower().startswith("error"):  # uv's error, and the lines it wraps onto
                    said = [line]
                elif said:
                    said.append(line)
                if on_line:
                    on_line(line)
        code = proc.wait()
    if code != 0:
        raise ForgeError(f"{what} failed (exit {code}): {(' '.join(said[:4]) or last)[:300]} — full log: {log}")


def install_agent(spec: ScaffoldSpec, *, force: bool = False, on_line: LineSink | None = None) -> AgentInstall:
    """Install a black-box scaffold's program under ``$FORGE_HOME/agents/<name>``.

    npm packages are installed into a staging folder that is renamed into place only when
    complete (npm's ``.bin`` links are relative). A pip agent gets a venv of its own, built at its
    final path because venvs cannot be moved. Either way, the marker file is written last, so a
    half-finished install never counts as installed. The recipe's ``scripts`` are copied in
    before the marker.
    """
    recipe = spec.install
    if recipe is None:
        raise ForgeError(f"scaffold '{spec.name}' is {spec.kind}-box and has no install recipe")
    if not force and (done := installed(spec)) is not None:
        return done
    prefix = agent_prefix(spec.name)
    work = prefix.with_name(f".{spec.name}.installing") if recipe.manager == "npm" else prefix
    for folder in {work, prefix}:
        shutil.rmtree(folder, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        installer = _install_npm if recipe.manager == "npm" else _install_pip
        version = installer(recipe, work, install_log(spec.name), on_line)
        copy_scripts(recipe, work)
        if work != prefix:
            work.rename(prefix)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    binary = bin_path(recipe, prefix)
    if not binary.exists():
        raise ForgeError(f"installed {recipe.requirement} but {binary} is missing — full log: {install_log(spec.name)}")
    record = {"requirement": _requirement_key(recipe), "version": version, "bin": str(binary), "installed_at": time.time()}
    (prefix / MARKER).write_text(json.dumps(record, indent=2))
    return AgentInstall(spec.name, prefix, record["requirement"], version, binary, record["installed_at"], fresh=True)


def copy_scripts(recipe: InstallRecipe, prefix: Path) -> None:
    """Copy the recipe's ``scripts`` (files its plugin ships) into the install folder ``prefix``
    (``$agent_dir``), modes kept: under ``$FORGE_HOME/agents``, every sandbox sees them."""
    for script in map(Path, recipe.scripts):
        try:
            shutil.copy2(script, prefix / script.name)
        except OSError as exc:
            raise ForgeError(f"cannot copy the agent's script {script} into {prefix}: {exc.strerror}") from None


def _install_npm(recipe: InstallRecipe, prefix: Path, log: Path, on_line: LineSink | None) -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise ForgeError("npm is not installed: install Node.js and npm (e.g. apt-get install nodejs npm)")
    cmd = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=http"]
    run_streamed("npm install", [*cmd, recipe.requirement, *recipe.extra_packages], log, on_line)
    try:
        return json.loads((prefix / "node_modules" / recipe.package / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return "?"


def _install_pip(recipe: InstallRecipe, prefix: Path, log: Path, on_line: LineSink | None) -> str:
    venv_dir = prefix / "venv"
    if on_line:
        on_line(f"creating a venv at {venv_dir}")
    run_streamed("creating a venv", [sys.executable, "-m", "venv", str(venv_dir)], log, on_line)
    python = str(venv_dir / "bin" / "python")
    what, install, env = pip_install_command(python)
    run_streamed(what, [*install, recipe.requirement, *recipe.extra_packages], log, on_line, env=env)
    runner = runner_script(recipe)
    if runner is not None:
        program = venv_dir / "bin" / recipe.bin
        program.write_text(f"#!{python}\n" + runner.read_text())
        program.chmod(0o755)
    where = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    shutil.copy2(runner_module(), Path(where) / RUNNER_MODULE)
    probe = f"import importlib.metadata as m; print(m.version({recipe.package!r}))"
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    return done.stdout.strip() or "?"


# pip's settings uv reads under its own names (uv does not read pip.conf)
PIP_TO_UV = {"PIP_INDEX_URL": "UV_INDEX_URL", "PIP_EXTRA_INDEX_URL": "UV_EXTRA_INDEX_URL",
             "PIP_FIND_LINKS": "UV_FIND_LINKS", "PIP_CONSTRAINT": "UV_CONSTRAINT"}


def uv_binary() -> str | None:
    """uv's program: the one installed beside Forge's Python (the ``uv`` dependency), else on PATH;
    None where there is none, or where ``FORGE_AGENT_INSTALLER=pip`` asks for pip."""
    if os.environ.get("FORGE_AGENT_INSTALLER", "").lower() == "pip":
        return None
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    try:
        from uv import find_uv_bin  # the uv distribution's own locator (a few lines, no import cost)

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def pip_install_command(python: str) -> tuple[str, list[str], dict[str, str]]:
    """(what, the install command less its requirements, its environment) for the venv of ``python``:
    ``uv pip install`` (parallel downloads; an agent like aider installs in ~8 s instead of ~47 s with
    pip) with bytecode compiled as pip does, else pip itself. pip's index settings in the environment
    are passed to uv under uv's names."""
    uv = uv_binary()
    if uv is None:
        return "pip install", [python, "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off"], dict(os.environ)
    env = dict(os.environ)
    for pip_name, uv_name in PIP_TO_UV.items():
        if pip_name in env and uv_name not in env:
            env[uv_name] = env[pip_name]
    return "uv pip install", [uv, "pip", "install", "--python", python, "--compile-bytecode"], env


def remove_agent(spec: ScaffoldSpec) -> bool:
    """Delete an installed agent's folder. Returns False when nothing was installed."""
    prefix = agent_prefix(spec.name)
    if not prefix.exists():
        return False
    shutil.rmtree(prefix)
    return True


# ---------------------------------------------------------------------------------------------
# plugin distributions


def distribution_name(target: str) -> str:
    """The distribution a ``forge scaffold add`` target installs: a path's project name, or the requirement's name."""
    path = Path(target)
    if path.exists():
        pyproject = path / "pyproject.toml"
        if path.is_dir() and pyproject.is_file():
            try:
                return tomllib.loads(pyproject.read_text())["project"]["name"]
            except (KeyError, tomllib.TOMLDecodeError) as exc:
                raise ForgeError(f"{pyproject}: cannot read [project].name ({exc})") from None
        if path.suffix == ".whl":
            return path.name.split("-")[0]
        raise ForgeError(f"{path} is neither a plugin folder with a pyproject.toml nor a wheel")

    try:
        return Requirement(target).name
    except InvalidRequirement:
        raise ForgeError(f"'{target}' is not a scaffold name, a path, or a package requirement") from None


def pip_install(target: str, on_line: LineSink | None = None, log: Path | None = None) -> None:
    """``pip install TARGET`` into the environment Forge runs in."""
    arg = str(Path(target).resolve()) if Path(target).exists() else target
    log = log or install_log("plugin")
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    run_streamed("pip install", [sys.executable, "-m", "pip", "install", "--progress-bar", "off", arg], log, on_line, env=env)


def pip_uninstall(dist: str, on_line: LineSink | None = None) -> None:
    run_streamed("pip uninstall", [sys.executable, "-m", "pip", "uninstall", "-y", dist], install_log("plugin"), on_line)

"""Forge's MCP servers for black-box agents: where they run from, and each agent's own configuration of them.

A black-box scaffold whose agent speaks MCP takes the same ``mcp`` option as a white-box one (the names
of :data:`forge_cli.rollout.mcp_tools.SERVERS`)::

    [scaffolds.claude-code]
    mcp = ["files"]

The agent itself starts the servers over stdio, inside its sandbox, from its own configuration, which
:func:`configure` writes into the launch (:data:`AGENTS`, the one table of the agents that can):

- ``opencode`` — ``"mcp"`` entries (``type = "local"``, a command array) in its ``opencode.json``; it
  offers them as ``SERVER_TOOL`` (``files_edit_file``); ``kilo``, its fork, the same in ``kilo.json``;
- ``codex`` — ``[mcp_servers.NAME]`` tables (``command``, ``args``) in its ``config.toml``, marked
  ``required``: codex otherwise starts its turn without a server that is slow to come up (on a loaded
  machine its first requests, or all of them, went out without the server's tools); required, it waits up
  to ``startup_timeout_sec``, and exits before its first model call if the server cannot start;
- ``cn`` (Continue's CLI) — an ``mcpServers`` list (``name``, ``command``, ``args``) in its YAML config;
- ``gptme`` — ``[[mcp.servers]]`` tables in the project config ``gptme.toml`` of its working folder;
- ``claude-code`` — ``--mcp-config FILE --strict-mcp-config`` (only Forge's servers); it offers them as
  ``mcp__SERVER__TOOL``; ``MCP_CONNECTION_NONBLOCKING=0`` and ``MCP_CONNECT_TIMEOUT_MS``, since it otherwise
  sends its first request without a server not yet up (2.1.x connects them in the background, and waits
  5 s at most when told to wait);
- ``openai-agents`` and ``smolagents`` — their runners' ``--mcp-config FILE`` (the same ``mcpServers``
  JSON as claude-code's): the servers' tools replace the built-in shell;
- any other agent whose launch declares how it takes them (``[launch.mcp]``,
  :class:`~forge_cli.specs.McpLaunch`): an ``mcpServers`` JSON file in its working folder (merged into
  the recipe's own file of that name) and extra arguments that may name the file (``$mcp_config``):
  gemini-cli and qwen-code (their ``settings.json``), copilot (``--additional-mcp-config @FILE``).

Where they run from (:func:`tools_env`): both sandboxes see ``$FORGE_HOME/agents`` read-only and the
Python installation the agents' venvs were made from, but not Forge's own venv (a container has only
Debian's ``python3``, without the ``mcp`` SDK). So the servers get a venv of their own,
``$FORGE_HOME/agents/.forge-mcp/venv``, made from the Python Forge runs on with the ``mcp`` SDK and its
dependencies *copied* from Forge's own environment (no download: the same files, already installed
here), and the server scripts beside it in ``.forge-mcp/tools``. It is made once, on the first launch
that asks for MCP (under a file lock, so concurrent trajectories make it once), and again when the
scripts or the SDK change. An MCP server that dies is the agent's business: it sees a tool error, or
the tool disappears; the trajectory goes on like any other. (One that never starts ends codex before
its first model call: a failure the policy could not cause, which the rollout runs again afresh up to
``rollout.infra_retries`` times.)
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata as metadata
import json
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from packaging.requirements import Requirement

from forge_cli.errors import ForgeError
from forge_cli.installer import MARKER
from forge_cli.paths import data_dir
from forge_cli.specs import McpLaunch, ScaffoldSpec, render_template

ENV_DIR = ".forge-mcp"  # under $FORGE_HOME/agents: visible read-only in every sandbox
CONFIG_FILE = ".forge-mcp.json"  # an mcpServers file in the work directory (claude-code, the runners)
ROOT_PACKAGE = "mcp"
STARTUP_TIMEOUT_S = 120  # importing the SDK on a loaded machine takes a while
TOOL_TIMEOUT_S = 300


@dataclass(frozen=True)
class Launch:
    """A rendered launch: the command, its environment and the files written before it runs."""

    command: list[str]
    env: dict[str, str]
    files: dict[str, str]


def _opencode(launch: Launch, servers: Mapping[str, list[str]], workdir: Path, name: str = "opencode.json") -> Launch:
    """opencode's ``mcp`` entries in its config file (kilo, its fork, reads the same from ``kilo.json``)."""
    config = json.loads(launch.files.get(name, "{}"))
    config.setdefault("mcp", {}).update({n: {"type": "local", "command": argv, "enabled": True,
                                             "timeout": STARTUP_TIMEOUT_S * 1000} for n, argv in servers.items()})
    return Launch(launch.command, launch.env, {**launch.files, name: json.dumps(config, indent=2)})


def _codex(launch: Launch, servers: Mapping[str, list[str]], workdir: Path) -> Launch:
    """codex: ``[mcp_servers.NAME]`` tables in its ``config.toml``, each ``required`` (codex waits for it)."""
    name = ".codex/config.toml"
    tables = "".join(f"\n[mcp_servers.{n}]\ncommand = {json.dumps(argv[0])}\nargs = {json.dumps(argv[1:])}\n"
                     f"startup_timeout_sec = {STARTUP_TIMEOUT_S}\ntool_timeout_sec = {TOOL_TIMEOUT_S}\nrequired = true\n"
                     for n, argv in servers.items())
    return Launch(launch.command, launch.env, {**launch.files, name: launch.files.get(name, "") + tables})


def _gptme(launch: Launch, servers: Mapping[str, list[str]], workdir: Path) -> Launch:
    """gptme: ``[[mcp.servers]]`` in the project config ``gptme.toml`` of its working folder."""
    name = "gptme.toml"
    tables = "\n[mcp]\nenabled = true\nauto_start = true\n" + "".join(
        f"\n[[mcp.servers]]\nname = {json.dumps(n)}\ncommand = {json.dumps(argv[0])}\nargs = {json.dumps(argv[1:])}\n"
        for n, argv in servers.items())
    return Launch(launch.command, launch.env, {**launch.files, name: launch.files.get(name, "") + tables})


def _continue(launch: Launch, servers: Mapping[str, list[str]], workdir: Path) -> Launch:
    """Continue's CLI: an ``mcpServers`` list in the YAML config its launch writes (JSON values are YAML)."""
    name = ".continue-forge.yaml"
    entries = "".join(f"  - name: {json.dumps(n)}\n    command: {json.dumps(argv[0])}\n    args: {json.dumps(argv[1:])}\n"
                      f"    connectionTimeout: {STARTUP_TIMEOUT_S * 1000}\n" for n, argv in servers.items())
    return Launch(launch.command, launch.env, {**launch.files, name: launch.files.get(name, "").rstrip("\n") + "\nmcpServers:\n" + entries})


def _servers(servers: Mapping[str, list[str]]) -> dict[str, Any]:
    return {n: {"type": "stdio", "command": argv[0], "args": argv[1:]} for n, argv in servers.items()}


def _servers_file(servers: Mapping[str, list[str]]) -> str:
    """The ``mcpServers`` JSON claude-code (and Forge's runners) read."""
    return json.dumps({"mcpServers": _servers(servers)}, indent=2)


def _claude_code(launch: Launch, servers: Mapping[str, list[str]], workdir: Path) -> Launch:
    # claude-code (2.1.x) connects its servers in the background and, even told to wait for them
    # (MCP_CONNECTION_NONBLOCKING=0), goes on after MCP_CONNECT_TIMEOUT_MS (5 s): on a loaded machine its first
    # request went out without the tools of a server not up yet; so it waits as long as the others do
    startup_ms = str(STARTUP_TIMEOUT_S * 1000)
    env = {**launch.env, "MCP_TIMEOUT": startup_ms, "MCP_TOOL_TIMEOUT": str(TOOL_TIMEOUT_S * 1000),
           "MCP_CONNECTION_NONBLOCKING": "0", "MCP_CONNECT_TIMEOUT_MS": startup_ms}
    return Launch([*launch.command, "--mcp-config", str(workdir / CONFIG_FILE), "--strict-mcp-config"], env,
                  {**launch.files, CONFIG_FILE: _servers_file(servers)})


def _runner(launch: Launch, servers: Mapping[str, list[str]], workdir: Path) -> Launch:
    return Launch([*launch.command, "--mcp-config", str(workdir / CONFIG_FILE)], launch.env,
                  {**launch.files, CONFIG_FILE: _servers_file(servers)})


Configure = Callable[[Launch, Mapping[str, list[str]], Path], Launch]

# the black-box agents that take Forge's MCP servers, and how each is told about them
AGENTS: dict[str, Configure] = {"opencode": _opencode, "codex": _codex, "claude-code": _claude_code,
                                "openai-agents": _runner, "smolagents": _runner,
                                "kilo": functools.partial(_opencode, name="kilo.json"), "cn": _continue, "gptme": _gptme}


def _declared(declared: McpLaunch, launch: Launch, servers: Mapping[str, list[str]], workdir: Path,
              values: Mapping[str, str]) -> Launch:
    """A launch's own ``[launch.mcp]``: the servers in its ``mcpServers`` file, its ``args`` after the command."""
    path = workdir / declared.file
    try:
        config = json.loads(launch.files.get(declared.file, "{}"))
    except ValueError as exc:
        raise ForgeError(f"the launch's file {declared.file} is not JSON, so the MCP servers cannot be added to it: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.setdefault(declared.key, {}), dict):
        raise ForgeError(f"the launch's file {declared.file} is not a JSON object with an {declared.key} object")
    config[declared.key].update({n: {**entry, **declared.server} for n, entry in _servers(servers).items()})
    args = [render_template(a, {**values, "mcp_config": str(path)}) for a in declared.args]
    return Launch([*launch.command, *args], launch.env, {**launch.files, declared.file: json.dumps(config, indent=2)})


def _name_and_declared(scaffold: "str | ScaffoldSpec") -> tuple[str, McpLaunch | None]:
    if isinstance(scaffold, str):
        return scaffold, None
    return scaffold.name, scaffold.launch.mcp if scaffold.launch is not None else None


def supports_mcp(scaffold: "str | ScaffoldSpec") -> bool:
    """Whether the agent takes MCP servers: Forge knows it (:data:`AGENTS`), or its launch declares how."""
    name, declared = _name_and_declared(scaffold)
    return name in AGENTS or declared is not None


def unsupported(scaffold: "str | ScaffoldSpec") -> str:
    """Why ``scaffold`` cannot be given MCP servers, in one line."""
    name, _ = _name_and_declared(scaffold)
    return (f"the agent '{name}' cannot use MCP servers (those that can: {', '.join(AGENTS)}, and any whose launch "
            "declares [launch.mcp])")


def check_supported(scaffold: "str | ScaffoldSpec", names: Sequence[str]) -> None:
    """A ForgeError when ``scaffold``'s agent is asked for MCP servers it cannot take."""
    if names and not supports_mcp(scaffold):
        raise ForgeError(unsupported(scaffold))


def configure(scaffold: "str | ScaffoldSpec", launch: Launch, servers: Mapping[str, list[str]], workdir: Path,
              values: Mapping[str, str] | None = None) -> Launch:
    """``launch`` with ``servers`` (name → the argv that starts it inside the sandbox) in the agent's own
    MCP configuration: Forge's own for the agents of :data:`AGENTS`, else the scaffold's ``[launch.mcp]``
    (its ``args`` rendered with the launch placeholders ``values`` and ``$mcp_config``)."""
    check_supported(scaffold, list(servers))
    if not servers:
        return launch
    name, declared = _name_and_declared(scaffold)
    if name in AGENTS:
        return AGENTS[name](launch, servers, workdir)
    assert declared is not None
    return _declared(declared, launch, servers, workdir, values or {})


# ---- the servers' own environment under $FORGE_HOME/agents --------------------------------------------------


def _closure(root: str) -> list[Any]:
    """The installed distributions ``root`` needs (its requirements for this platform, extras followed)."""
    found: dict[str, Any] = {}

    def walk(name: str, extras: frozenset[str] = frozenset()) -> None:
        key = re.sub(r"[-_.]+", "-", name).lower()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise ForgeError(f"Forge's environment lacks {name}, which its MCP servers need "
                             "(pip install 'forge-cli[sandbox]')") from None
        if key in found and not extras:
            return
        found[key] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
                walk(req.name, frozenset(req.extras))

    walk(root)
    return list(found.values())


def _key(scripts: Path) -> str:
    digest = hashlib.sha256()
    for script in sorted(scripts.glob("*.py")):
        digest.update(script.name.encode() + b"\0" + script.read_bytes())
    return f"python {sys.version.split()[0]} {ROOT_PACKAGE} {metadata.version(ROOT_PACKAGE)} tools {digest.hexdigest()[:16]}"


def _build(target: Path, scripts: Path, key: str) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target / "venv")], check=True,
                   capture_output=True)
    relative = Path(sysconfig.get_path("purelib")).relative_to(sys.prefix)
    site = target / "venv" / relative
    for dist in _closure(ROOT_PACKAGE):
        base = Path(dist.locate_file("")).resolve()
        for file in dist.files or []:
            source = Path(dist.locate_file(file)).resolve()
            if not source.is_file() or not source.is_relative_to(base) or "__pycache__" in source.parts:
                continue  # its console scripts live outside site-packages
            dest = site / source.relative_to(base)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest)
    shutil.copytree(scripts, target / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    (target / MARKER).write_text(json.dumps({"requirement": key}))


def tools_dir() -> Path:
    """The MCP servers' scripts as Forge ships them (copied into each sandbox that runs them)."""
    return data_dir("sandboxes") / "tools"


def tools_env(agents_home: Path) -> tuple[Path, Path]:
    """``(python, tools folder)`` of the MCP servers' environment under ``agents_home``, made now if it is
    missing or stale (see the module's docstring)."""
    scripts = tools_dir()
    key = _key(scripts)
    target = Path(agents_home) / ENV_DIR
    python = target / "venv" / "bin" / "python"

    def current() -> bool:
        try:
            return json.loads((target / MARKER).read_text()).get("requirement") == key and python.exists()
        except (OSError, ValueError):
            return False

    if current():
        return python, target / "tools"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{ENV_DIR}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not current():
            staging = target.with_name(f"{ENV_DIR}.building")
            shutil.rmtree(staging, ignore_errors=True)
            try:
                _build(staging, scripts, key)
            except (OSError, ValueError, subprocess.SubprocessError) as exc:
                shutil.rmtree(staging, ignore_errors=True)
                raise ForgeError(f"could not make the MCP servers' environment at {target}: {exc}") from None
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
    return python, target / "tools"

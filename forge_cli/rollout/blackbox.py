"""A black-box scaffold's launch recipe → one run of the agent program in a sandbox.

:func:`run_blackbox` is what the rollout driver calls for one trajectory of a black-box scaffold.
It installs nothing (``forge scaffold add NAME`` does); it renders the scaffold's
:class:`~forge_cli.specs.LaunchSpec` with the trajectory's own gateway URL, API key and model name
and the task's prompt, writes the task's files and the recipe's files into the work directory,
runs the program in a sandbox (the ``local`` one unless the caller hands another) under a
wall-time limit and optional memory / CPU-time limits, and returns a :class:`BlackboxResult`:

- ``completed`` — the program exited 0 within its limits;
- ``failed`` — it exited non-zero, was killed by a signal, ran out of memory or CPU time, or
  could not start;
- ``timed_out`` — it was still running at the deadline; it and everything it started were killed.

A misbehaving program is a result, never an exception. What *is* raised, as a
:class:`~forge_cli.errors.ForgeError`, is a mistake that would fail every trajectory alike: the
agent is not installed, the scaffold is not black-box, its recipe names an unknown placeholder,
or a task file's path leaves the work directory.

The completions the program made are recorded by the gateway as they happen, so a crash or a
timeout keeps them; ending the trajectory (``finish_session``) is the caller's job.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from forge_cli import installer
from forge_cli.errors import ForgeError, InfraError
from forge_cli.paths import data_dir
from forge_cli.rollout import agent_mcp
from forge_cli.rollout.agent_mcp import check_supported
from forge_cli.rollout.mcp_tools import server, write_corpus
from forge_cli.sandbox.contract import view_workdir
from forge_cli.sandbox.local import LocalSandbox
from forge_cli.tasks.types import Transcript

if TYPE_CHECKING:
    from forge_cli.installer import AgentInstall
    from forge_cli.sandbox.contract import ExecResult, Sandbox
    from forge_cli.specs import ScaffoldSpec
    from forge_cli.tasks.types import Task

BlackboxStatus = Literal["completed", "failed", "timed_out"]


@dataclass(frozen=True)
class BlackboxResult:
    """How one launch of a black-box agent ended.

    ``status`` is ``completed`` | ``failed`` | ``timed_out`` (the trajectory statuses of DESIGN §2)
    and ``reason`` says why in one line. ``exit_code`` is the program's (``-N`` for signal ``N``,
    ``None`` if it never started); ``stdout`` / ``stderr`` are the tails of its output; ``answer``
    is its final answer as the recipe's ``answer`` rule finds it (``None`` when there is none);
    ``command`` is the rendered command line with the API key replaced by ``***``.
    """

    status: BlackboxStatus
    reason: str
    exit_code: int | None
    stdout: str
    stderr: str
    answer: str | None
    wall_s: float
    command: tuple[str, ...]

    def transcript(self) -> "Transcript":
        """What the task's verifier gets (:class:`forge_cli.tasks.types.Transcript`)."""
        return Transcript(answer=self.answer, messages=(), exit_code=self.exit_code, stdout=self.stdout)


def find_install(spec: "ScaffoldSpec", agents_home: Path | None = None) -> "AgentInstall":
    """The recorded install of ``spec``'s program, under ``agents_home`` (default ``$FORGE_HOME/agents``);
    a ForgeError naming ``forge scaffold add`` when it is not installed (or its install is stale)."""
    if spec.kind != "black" or spec.install is None or spec.launch is None:
        raise ForgeError(f"scaffold '{spec.name}' is not a black-box scaffold with an install recipe and a launch")
    found = installed_under(spec, agents_home) if agents_home is not None else installer.installed(spec)
    if found is None:
        where = agents_home / spec.name if agents_home is not None else installer.agent_prefix(spec.name)
        # an infrastructure failure when a rollout meets it (the preflight refuses to start without the install)
        raise InfraError(
            "install", f"the agent '{spec.name}' is not installed at {where}: run `forge scaffold add {spec.name}` first"
        )
    return found


def installed_under(spec: "ScaffoldSpec", agents_home: Path) -> "AgentInstall | None":
    """:func:`forge_cli.installer.installed`, for an agents folder other than ``$FORGE_HOME/agents``."""
    assert spec.install is not None
    prefix = Path(agents_home) / spec.name
    try:
        data = json.loads((prefix / installer.MARKER).read_text())
    except (OSError, ValueError):
        return None
    binary = Path(data.get("bin", ""))
    if data.get("requirement") != installer._requirement_key(spec.install) or not binary.exists():
        return None
    return installer.AgentInstall(spec.name, prefix, data["requirement"], data.get("version", "?"), binary,
                                  data.get("installed_at", 0))


def launch_values(spec: "ScaffoldSpec", install: "AgentInstall", *, base_url: str, api_key: str, model: str,
                  prompt: str, workdir: Path) -> dict[str, str]:
    """The placeholders a launch recipe is rendered with (see :class:`forge_cli.specs.LaunchSpec`).

    ``$python`` is the python beside a pip agent's program (its own venv's); npm agents have none.
    ``$agent_dir`` is the install folder (the recipe's ``scripts`` are copied there).
    """
    base = base_url.rstrip("/")
    values = {
        "bin": str(install.bin),
        "agent_dir": str(install.prefix),
        "scaffolds": str(data_dir("scaffolds")),
        "workdir": str(workdir),
        "base_url": base,
        "gateway_url": base[: -len("/v1")] if base.endswith("/v1") else base,
        "api_key": api_key,
        "model": model,
        "prompt": prompt,
    }
    if spec.install is not None and spec.install.manager == "pip":
        values["python"] = str(install.bin.parent / "python")
    return values


async def run_blackbox(
    spec: "ScaffoldSpec",
    *,
    base_url: str,
    api_key: str,
    model: str,
    task: "Task",
    workdir: Path | None = None,
    timeout_s: float,
    memory_bytes: int | None = None,
    cpu_time_s: float | None = None,
    agents_home: Path | None = None,
    sandbox: "Sandbox | None" = None,
    extra_args: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
    mcp: Sequence[str] = (),
) -> BlackboxResult:
    """Launch ``spec``'s installed agent once on ``task`` against the gateway and wait for its end.

    ``base_url`` (``http://127.0.0.1:PORT/v1`` or a session's ``…/s/ID/v1``), ``api_key`` and
    ``model`` are the trajectory's own; ``task.prompt`` becomes ``$prompt`` and ``task.files`` are
    written into the work directory before the recipe's own files. ``timeout_s`` is the wall-time
    budget; ``memory_bytes`` and ``cpu_time_s`` are per-process limits (``None``: none).
    ``agents_home`` is where agents are installed (default ``$FORGE_HOME/agents``). Without a
    ``sandbox``, a plain-subprocess :class:`~forge_cli.sandbox.local.LocalSandbox` (no bubblewrap:
    it reaches ``base_url`` on the host's loopback) on ``workdir`` is opened and closed here; a
    caller's ``sandbox`` (one opened with a :class:`~forge_cli.sandbox.contract.GatewayAccess`, for
    isolation) is used as it is (its work directory is ``workdir``) and left open. ``extra_args`` are
    appended to the rendered command and ``extra_env`` added to its environment (a scaffold's
    ``extra_args`` / ``env`` options). ``mcp`` names Forge's MCP servers (the scaffold's ``mcp``
    option) that the agent is configured to start inside the sandbox
    (:mod:`forge_cli.rollout.agent_mcp`). See the module's docstring for what is returned and what is raised.
    """
    if timeout_s is None or timeout_s <= 0:
        raise ForgeError(f"run_blackbox: timeout_s must be a positive number of seconds, not {timeout_s}")
    install = find_install(spec, agents_home)
    assert spec.launch is not None
    if mcp:
        check_supported(spec, mcp)
    owned = sandbox is None
    if sandbox is None:
        if workdir is None:
            raise ForgeError("run_blackbox: give a workdir (or a sandbox)")

        # a plain subprocess: the agent reaches base_url over the host's loopback (no gateway socket is known here)
        sandbox = LocalSandbox(workdir, memory_bytes=memory_bytes, cpu_time_s=cpu_time_s, isolation="none")
    elif workdir is not None and Path(workdir).resolve() != Path(sandbox.workdir).resolve():
        raise ForgeError(f"run_blackbox: workdir {workdir} is not the sandbox's work directory {sandbox.workdir}")
    try:
        values = launch_values(spec, install, base_url=base_url, api_key=api_key, model=model, prompt=task.prompt,
                               workdir=view_workdir(sandbox))
        command, env, files = spec.launch.render(values)
        if mcp:
            command, env, files = await _with_mcp(spec, command, env, files, mcp, sandbox, task,
                                                  install.prefix.parent, values)
        command, env = [*command, *extra_args], {**env, **(extra_env or {})}
        for name, text in {**task.files, **files}.items():
            await sandbox.write_file(name, text)
        started = time.monotonic()
        done = await sandbox.exec(command, env=env, timeout_s=timeout_s, memory_bytes=memory_bytes,
                                  cpu_time_s=cpu_time_s)
        answer = await _answer(spec.launch.answer, done, sandbox)
        return _result(done, answer, [c.replace(api_key, "***") if len(api_key) >= 8 else c for c in command],
                       time.monotonic() - started)
    finally:
        if owned:
            await sandbox.close()


async def _with_mcp(spec: "ScaffoldSpec", command: list[str], env: dict[str, str], files: dict[str, str],
                    names: Sequence[str], sandbox: "Sandbox", task: "Task", agents_home: Path, values: dict[str, str]
                    ) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """The launch with the MCP servers ``names`` in the agent's own configuration, each started by the
    servers' environment under ``agents_home`` in the work directory (a search corpus written there)."""
    python, folder = await asyncio.to_thread(agent_mcp.tools_env, agents_home)
    servers = {}
    for name in dict.fromkeys(names):
        shipped = server(name)
        args = ["--corpus", await write_corpus(sandbox, task)] if name == "search" else []
        servers[name] = [str(python), str(folder / shipped.script), "--root", str(view_workdir(sandbox)), *args]
    done = agent_mcp.configure(spec, agent_mcp.Launch(command, env, files), servers, view_workdir(sandbox), values)
    return done.command, done.env, done.files


async def _answer(rule: str, done: "ExecResult", sandbox: "Sandbox") -> str | None:
    """The final answer under ``rule`` (:data:`forge_cli.specs.ANSWER_RULES`); ``None`` when it is empty or missing."""
    if rule.startswith("file:"):
        try:
            text = (await sandbox.read_file(rule[len("file:"):])).decode("utf-8", errors="replace")
        except ForgeError:
            return None
        return text.strip() or None
    if rule == "last-line":
        return next((line.strip() for line in reversed(done.stdout.splitlines()) if line.strip()), None)
    if rule.startswith("json:"):
        return json_answer(done.stdout, rule[len("json:"):])
    return done.stdout.strip() or None


def json_answer(output: str, path: str) -> str | None:
    """The ``json:KEY`` rule: the value at ``path`` (dotted keys) in the last line of ``output`` that
    is a JSON object holding it (an agent printing JSON events); text as it is, other values as JSON."""
    for line in reversed(output.splitlines()):
        try:
            value: Any = json.loads(line)
        except ValueError:
            continue
        for key in path.split("."):
            value = value.get(key, _MISSING) if isinstance(value, dict) else _MISSING
        if value is _MISSING or value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value)
        return text.strip() or None
    return None


_MISSING = object()


def _result(done: "ExecResult", answer: str | None, command: list[str], wall: float) -> BlackboxResult:
    if done.timed_out:
        status: BlackboxStatus = "timed_out"
    elif done.ok:
        status = "completed"
    else:
        status = "failed"
    return BlackboxResult(status=status, reason=done.reason, exit_code=done.exit_code, stdout=done.stdout,
                          stderr=done.stderr, answer=answer, wall_s=wall, command=tuple(command))

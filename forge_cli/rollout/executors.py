"""Where a trajectory's scaffold runs: in the driver's process (``local``) or as a Ray task (``ray``).

A :class:`Job` is everything one run needs, by name and value, so that it can travel to a Ray
worker: the worker resolves the scaffold and the task suite from its own plugin registry, runs
the scaffold against the gateway's URL with the trajectory's key, and returns the transcript
and the events. The driver verifies and rewards in its own process either way. ``EXECUTORS`` is
the one table of executor names.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from forge_cli.errors import ForgeError, InfraError
from forge_cli.plugins import get_registry
from forge_cli.rollout.blackbox import run_blackbox
from forge_cli.rollout.loop import run_episode
from forge_cli.rollout.mcp_tools import episode_tools, mcp_servers
from forge_cli.sandbox.contract import GatewayAccess
from forge_cli.tasks.suites import resolve_suite
from forge_cli.tasks.types import Transcript, verify_outcome
from forge_cli.tasks.workdir import seed_workdir

if TYPE_CHECKING:
    from forge_cli.specs import ScaffoldSpec
    from forge_cli.tasks.types import Outcome, Task, TaskSuite


@dataclass(frozen=True)
class Job:
    scaffold: str
    suite: str
    verifier: str | None
    task: "Task"
    workdir: str
    base_url: str
    api_key: str
    model: str
    timeout_s: float
    options: dict[str, Any] = field(default_factory=dict)
    sandbox: str = "local"  # rollout.sandbox: the registered sandbox black-box programs run in
    gateway_socket: str | None = None  # the gateway's unix socket (a sandbox without network reaches it so)


class AgentTimedOut(ForgeError):
    """A black-box program ran past its time budget (its sandbox killed it): a timed-out trajectory."""


VERIFY_TIMEOUT_S = 120.0  # a verifier that hangs fails its trajectory instead of the rollout


async def run_job(job: Job, spec: "ScaffoldSpec | None" = None, suite: "TaskSuite | None" = None,
                  sandbox_options: Any = None) -> tuple["Transcript", list[Any], "Outcome"]:
    """Run a job's scaffold and verify its work where it ran (the work directory is on this
    machine): ``(Transcript, events, Outcome)``. ``spec`` and ``suite`` default to the ones the
    registry of this process names. A black-box program that runs over its budget raises
    :class:`AgentTimedOut`; one that fails otherwise a :class:`ForgeError` with its reason."""
    registry = None
    if spec is None or suite is None:
        registry = get_registry()
        spec = spec or registry.scaffold(job.scaffold)
        suite = suite or resolve_suite(job.suite, job.verifier, registry)
    workdir = Path(job.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if spec.kind == "white":
        if registry is None:
            registry = get_registry()
        seed_workdir(job.task, workdir)  # task.files, confined to the workdir
        # the task's own tools, or (the options' mcp = [...]) those MCP servers serve from the job's sandbox
        async with episode_tools(job.options, suite, job.task, workdir,
                                 lambda: open_sandbox(registry, job, workdir, sandbox_options)) as tools:
            result = await run_episode(spec, base_url=job.base_url, api_key=job.api_key, prompt=job.task.prompt,
                                       options=job.options, model=job.model, tools=tools)
        transcript, events = Transcript(answer=result.answer), result.events
    else:
        if registry is None:
            registry = get_registry()
        sandbox = open_sandbox(registry, job, workdir, sandbox_options)  # [sandboxes.NAME]'s options
        try:  # run_blackbox writes task.files itself
            ran = await run_blackbox(spec, base_url=job.base_url, api_key=job.api_key, model=job.model, task=job.task,
                                     workdir=workdir, sandbox=sandbox, **launch_options(job))
            events = [agent_exit(ran)]  # what the program printed, kept with the trajectory however it ended
            if ran.status == "timed_out":
                raise with_events(AgentTimedOut(ran.reason), events)
            if ran.status != "completed" and ran.exit_code is None:  # the sandbox never started the program
                raise with_events(InfraError("sandbox", f"the agent never started: {ran.reason}"), events)
            if ran.status != "completed":
                raise with_events(ForgeError(f"the agent failed: {ran.reason}"), events)
            transcript = ran.transcript()
            # verified while the sandbox is still open: a verifier that runs programs (swe-mini's tests) runs them there
            try:
                return transcript, events, await _verify(suite, job, workdir, transcript, sandbox)
            except ForgeError as exc:
                raise with_events(exc, events)
        finally:
            await sandbox.close()
    return transcript, events, await _verify(suite, job, workdir, transcript)


OUTPUT_TAIL = 4000  # characters of a black-box agent's stdout and stderr kept with its trajectory


def agent_exit(ran: Any) -> dict[str, Any]:
    """The ``agent-exit`` event of a black-box run: how it ended and the tails of its output."""
    return {"kind": "agent-exit", "at": time.time(),
            "data": {"status": ran.status, "exit_code": ran.exit_code, "reason": ran.reason, "wall_s": round(ran.wall_s, 3),
                     "stdout": ran.stdout[-OUTPUT_TAIL:], "stderr": ran.stderr[-OUTPUT_TAIL:]}}


def with_events(exc: ForgeError, events: list[Any]) -> ForgeError:
    """``exc`` carrying the events of the run it ended (the driver records them with the failure)."""
    exc.events = events  # type: ignore[attr-defined]
    return exc


async def _verify(suite: "TaskSuite", job: Job, workdir: Path, transcript: "Transcript", sandbox: Any = None) -> "Outcome":
    """The suite's verifier on the work (in ``sandbox`` when it runs programs), within VERIFY_TIMEOUT_S."""
    try:
        return await asyncio.wait_for(verify_outcome(suite.verifier, job.task, workdir, transcript, sandbox),
                                      timeout=VERIFY_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise InfraError("verifier", f"the verifier did not answer within {VERIFY_TIMEOUT_S:g} s") from None
    except Exception as exc:  # a verifier that raises judged nothing: not the policy's failure
        raise InfraError("verifier", f"the verifier of {suite.name} raised {type(exc).__name__}: {exc}") from None


def launch_options(job: Job) -> dict[str, Any]:
    """What a black-box scaffold's own options (``[scaffolds.NAME]``: ``timeout_s``, ``extra_args``,
    ``env``, ``mcp``) change in its launch: the budget is the shorter of the trajectory's and the scaffold's."""
    timeout = job.options.get("timeout_s")
    return {"timeout_s": min(job.timeout_s, float(timeout)) if timeout else job.timeout_s,
            "extra_args": list(job.options.get("extra_args") or ()), "extra_env": dict(job.options.get("env") or {}),
            "mcp": mcp_servers(job.options)}


def open_sandbox(registry: Any, job: Job, workdir: Path, options: Any = None) -> Any:
    """The job's sandbox (``job.sandbox``, registered) on ``workdir``, with the gateway reachable inside
    at the port of ``job.base_url`` through ``job.gateway_socket`` when the sandbox isolates the network."""
    entry = registry.sandboxes.get(job.sandbox)
    if entry is None or entry.value.open is None:
        known = ", ".join(n for n, e in registry.sandboxes.items() if e.value.open is not None)
        raise ForgeError(f"sandbox '{job.sandbox}' cannot run agents (known: {known})")
    port = urlsplit(job.base_url).port or 80
    access = GatewayAccess(Path(job.gateway_socket), port) if job.gateway_socket else None
    try:
        return entry.value.open(workdir, options, access)
    except Exception as exc:  # not the policy's doing: an infrastructure failure
        raise InfraError("sandbox", f"the {job.sandbox} sandbox did not start: {type(exc).__name__}: {exc}") from None


class LocalExecutor:
    """Runs jobs on the driver's event loop (white-box) or as its child processes (black-box)."""

    name = "local"

    def __init__(self, spec: "ScaffoldSpec", suite: "TaskSuite", *, sandbox_options: Any = None, **_: Any) -> None:
        self.spec, self.suite, self.sandbox_options = spec, suite, sandbox_options

    async def run(self, job: Job) -> tuple["Transcript", list[Any], "Outcome"]:
        return await run_job(job, self.spec, self.suite, self.sandbox_options)

    def close(self) -> None:
        pass


def _ray_job(job: Job, sandbox_options: Any = None) -> tuple["Transcript", list[Any], "Outcome"]:
    """A Ray worker's side: a fresh event loop for one job."""
    return asyncio.run(run_job(job, sandbox_options=sandbox_options))


class RayExecutor:
    """Runs each job as a Ray task: on a local Ray instance (``ray.init()``) or the cluster at
    ``address``. A job cancelled (its time budget, Ctrl-C) is cancelled in Ray too."""

    name = "ray"

    def __init__(self, spec: "ScaffoldSpec", suite: "TaskSuite", *, address: str | None = None, sandbox_options: Any = None,
                 **_: Any) -> None:
        try:
            import ray
        except ImportError:
            raise ForgeError("--executor ray needs Ray (pip install 'ray>=2.30')") from None
        self.ray = ray
        self.started = not ray.is_initialized()
        if self.started:
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                         configure_logging=False)
            except Exception as exc:  # Ray raises ConnectionError and others
                raise ForgeError(f"Ray did not start{f' at {address}' if address else ''}: {type(exc).__name__}: {exc}") from None
        self.remote = ray.remote(num_cpus=0.25)(_ray_job)  # jobs wait on the gateway, not on a core
        self.sandbox_options = sandbox_options

    async def run(self, job: Job) -> tuple["Transcript", list[Any], "Outcome"]:
        ref = self.remote.remote(job, self.sandbox_options)
        try:
            return await ref
        except asyncio.CancelledError:
            # not force: the worker's task is cancelled, so its sandbox kills the agent's process group
            self.ray.cancel(ref)
            raise
        except self.ray.exceptions.RayTaskError as exc:  # the scaffold raised in the worker: the same error here
            cause = exc.as_instanceof_cause()
            raise (cause if isinstance(cause, ForgeError) else ForgeError(f"{type(exc.cause).__name__}: {exc.cause}")) from None

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()


# ``rollout.executor``: each executor's name (forge_cli.configs.rollout.EXECUTOR_NAMES) -> its class
EXECUTORS: dict[str, type] = {"local": LocalExecutor, "ray": RayExecutor}


def make_executor(name: str, spec: "ScaffoldSpec", suite: "TaskSuite", *, address: str | None = None,
                  sandbox_options: Any = None) -> Any:
    if name not in EXECUTORS:
        raise ForgeError(f"unknown executor {name!r}: choose one of {', '.join(EXECUTORS)}")
    return EXECUTORS[name](spec, suite, address=address, sandbox_options=sandbox_options)

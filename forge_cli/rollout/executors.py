"""Where a trajectory's scaffold runs: in the driver's process (``local``) or as a Ray task (``ray``).

A :class:`Job` is everything one run needs, by name and value, so that it can travel to a Ray
worker: the worker resolves the scaffold and the task suite from its own plugin registry, runs
the scaffold against the gateway's URL with the trajectory's key, and returns the transcript
and the events. The driver verifies and rewards in its own process either way. ``EXECUTORS`` is
the one table of executor names.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forge_cli.errors import ForgeError

if TYPE_CHECKING:
    from forge_cli.specs import ScaffoldSpec
    from forge_cli.tasks.types import Task, TaskSuite, Transcript


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


async def run_job(job: Job, spec: "ScaffoldSpec | None" = None, suite: "TaskSuite | None" = None) -> tuple["Transcript", list[Any]]:
    """Run a job's scaffold: ``(Transcript, events)``. ``spec`` and ``suite`` default to the ones
    the registry of this process names."""
    from forge_cli.tasks.types import Transcript

    if spec is None or suite is None:
        from forge_cli.plugins import get_registry
        from forge_cli.rollout.driver import resolve_suite

        registry = get_registry()
        spec = spec or registry.scaffold(job.scaffold)
        suite = suite or resolve_suite(job.suite, job.verifier, registry)
    from forge_cli.tasks.workdir import seed_workdir

    workdir = Path(job.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    seed_workdir(job.task, workdir)  # task.files, confined to the workdir
    if spec.kind == "white":
        from forge_cli.rollout.loop import run_episode

        result = await run_episode(spec, base_url=job.base_url, api_key=job.api_key, prompt=job.task.prompt,
                                   options=job.options, model=job.model, tools=suite.tools(job.task, workdir))
        return Transcript(answer=result.answer), result.events
    from forge_cli.rollout.blackbox import run_blackbox

    ran = await run_blackbox(spec, base_url=job.base_url, api_key=job.api_key, model=job.model, task=job.task,
                             workdir=workdir, timeout_s=job.timeout_s)
    if ran.status != "completed":
        raise ForgeError(f"the agent {ran.status.replace('_', ' ')}: {ran.reason}")
    return Transcript(answer=ran.answer, exit_code=ran.exit_code, stdout=ran.stdout), []


class LocalExecutor:
    """Runs jobs on the driver's event loop (white-box) or as its child processes (black-box)."""

    name = "local"

    def __init__(self, spec: "ScaffoldSpec", suite: "TaskSuite", **_: Any) -> None:
        self.spec, self.suite = spec, suite

    async def run(self, job: Job) -> tuple["Transcript", list[Any]]:
        return await run_job(job, self.spec, self.suite)

    def close(self) -> None:
        pass


def _ray_job(job: Job) -> tuple["Transcript", list[Any]]:
    """A Ray worker's side: a fresh event loop for one job."""
    return asyncio.run(run_job(job))


class RayExecutor:
    """Runs each job as a Ray task: on a local Ray instance (``ray.init()``) or the cluster at
    ``address``. A job cancelled (its time budget, Ctrl-C) is cancelled in Ray too."""

    name = "ray"

    def __init__(self, spec: "ScaffoldSpec", suite: "TaskSuite", *, address: str | None = None, **_: Any) -> None:
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

    async def run(self, job: Job) -> tuple["Transcript", list[Any]]:
        ref = self.remote.remote(job)
        try:
            return await ref
        except asyncio.CancelledError:
            self.ray.cancel(ref, force=True)
            raise
        except self.ray.exceptions.RayTaskError as exc:  # the scaffold raised in the worker: the same error here
            raise exc.as_instanceof_cause() from None

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()


EXECUTORS: dict[str, type] = {"local": LocalExecutor, "ray": RayExecutor}


def make_executor(name: str, spec: "ScaffoldSpec", suite: "TaskSuite", *, address: str | None = None) -> Any:
    if name not in EXECUTORS:
        raise ForgeError(f"unknown executor {name!r}: choose one of {', '.join(EXECUTORS)}")
    return EXECUTORS[name](spec, suite, address=address)

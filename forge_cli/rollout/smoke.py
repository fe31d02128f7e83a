"""``forge scaffold doctor NAME``: is this agent ready to be trained? Checks in order, each a :class:`Check`.

1. **registered**: its definition, plugin and API;
2. **installed** (black-box): the install Forge recorded, and its version;
3. **starts**: its program answers ``--version`` (or ``--help``) on the host within 60 s;
4. **sandbox**: the backend it would run in is usable here (bubblewrap for ``local``, the image for ``docker``);
5. **one task**: a real rollout of one ``files`` task in that sandbox, through a gateway on loopback, with
   the scripted ``files_agent`` policy (it calls the agent's *own* shell tool, whatever it names it, with a
   command that does the task; DSPy's text fields for a DSPy agent) scored by the embedded model (or ``--model``): the model calls it made,
   the tool it called, its exit, and whether the verifier found the file. Recorded in a run of a
   temporary folder, removed afterwards.

A check that cannot run because an earlier one failed is skipped (``ok`` None), with the reason.
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from forge_cli.errors import ForgeError
from forge_cli.installer import installed
from forge_cli.rollout.driver import rollout
from forge_cli.rollout.records import RolloutRequest
from forge_cli.sandbox.bwrap import unavailable
from forge_cli.sandbox.docker import DEFAULT_IMAGE, image_problem
from forge_cli.specs import ScaffoldSpec

SMOKE_POLICY = "forge_cli.tasks.demo_policies:files_agent"
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report: ``ok`` True (passed), False (failed) or None (skipped)."""

    name: str
    ok: bool | None
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.name, "ok": self.ok, "detail": self.detail}


def program_starts(argv0: str, timeout_s: float = START_TIMEOUT_S) -> Check:
    """``argv0 --version``, else ``argv0 --help``: the first line it printed, or why it did not start."""
    last = ""
    for flag in ("--version", "--help"):
        try:
            done = subprocess.run([argv0, flag], capture_output=True, text=True, timeout=timeout_s,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Check("starts", False, f"{argv0} {flag} did not end within {timeout_s:.0f} s")
        except OSError as exc:
            return Check("starts", False, f"cannot run {argv0}: {exc.strerror}")
        lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        if done.returncode == 0:
            return Check("starts", True, f"{Path(argv0).name} {flag}: {lines[0][:100] if lines else '(no output)'}")
        last = f"{Path(argv0).name} {flag} exited {done.returncode}: {lines[-1][:160] if lines else '(no output)'}"
    return Check("starts", False, last)


def sandbox_ready(backend: str) -> Check:
    """Whether the sandbox backend can run agents here."""
    if backend == "local":
        problem = unavailable()
        return Check("sandbox", problem is None, "bubblewrap works" if problem is None else
                     f"bubblewrap does not work here: {problem}")
    if backend == "docker":
        problem = image_problem(DEFAULT_IMAGE)
        return Check("sandbox", problem is None, f"the Docker engine has {DEFAULT_IMAGE}" if problem is None else problem)
    return Check("sandbox", None, f"'{backend}' is a plugin's sandbox: not checked before the task")


def static_checks(spec: ScaffoldSpec, plugin: str, backend: str) -> list[Check]:
    """Checks 1-4 (no model, no gateway)."""
    checks = [Check("registered", True, f"{spec.kind}-box, speaks {spec.api}, from plugin {plugin}")]
    if spec.kind == "white":
        return checks
    done = installed(spec)
    if done is None:
        checks.append(Check("installed", False, f"not installed: run `forge scaffold add {spec.name}`"))
        checks.append(Check("starts", None, "not installed"))
    else:
        checks.append(Check("installed", True, f"{done.requirement} {done.version} at {done.prefix}"))
        checks.append(program_starts(str(done.bin)))
    checks.append(sandbox_ready(backend))
    return checks


def smoke_overrides(model: Path | None, backend: str, runs: Path) -> dict[str, Any]:
    """The configuration of the one-task run: scripted engine, files_agent, recorded requests, a free port."""
    overrides: dict[str, Any] = {"model.engine.type": "scripted", "model.engine.policy": SMOKE_POLICY,
                                 "gateway.port": 0, "gateway.record_requests": True, "run.dir": str(runs),
                                 "rollout.sandbox": backend, "rollout.infra_retries": 0}
    if model is not None:
        overrides["model.path"] = str(model)
    return overrides


async def one_task(config: Any, name: str, timeout_s: float) -> Check:
    """Check 5: one ``files`` task, as :func:`forge_cli.rollout.driver.rollout` runs it."""
    from forge_cli.gateway.server import serve_gateway

    request = RolloutRequest(scaffold=name, suite="files", groups=1, n=1, concurrency=1, trajectory_timeout_s=timeout_s)
    async with serve_gateway(config, "doctor") as gw:
        await rollout(config, request, gateway=gw)
        (trajectory,) = [gw.pool.trajectory(t.id) for g in gw.pool.groups() for t in g.trajectories]
    return task_check(trajectory)


def task_check(trajectory: Any) -> Check:
    """What one trajectory says about the agent: its calls, its tool, its exit and the verifier's word."""
    events = {e.kind: e.data for e in trajectory.events}
    calls = trajectory.completions
    tools = sorted({c["name"] for comp in calls for c in (comp.tool_calls or [])})
    said = [f"{len(calls)} model call{'s' * (len(calls) != 1)}",
            f"called {', '.join(tools)}" if tools else "called no tool"]
    exit_ = events.get("agent-exit") or {}
    if exit_.get("reason"):
        said.append(str(exit_["reason"]))
    outcome = trajectory.rewards.get("outcome")
    ok = trajectory.status == "completed" and outcome == 1.0
    if not ok:
        status = getattr(trajectory.status, "value", trajectory.status)
        said.append(f"status {status}" + (f" (a failure of the {trajectory.infra}, not the policy's)" if trajectory.infra else ""))
        if trajectory.error and str(exit_.get("reason") or "") not in trajectory.error:
            said.append(trajectory.error)
        line = error_line(str(exit_.get("stderr") or ""))
        if line:
            said.append(f"its error: {line[:200]}")
        if calls and not tools:
            said.append("the policy found no shell tool among the tools it offered (see `forge pool show`)")
    said.append("the verifier found the file" if outcome == 1.0 else "the task was not done")
    return Check("one task", ok, "; ".join(said))


def error_line(stderr: str) -> str:
    """The line of an agent's stderr that says what went wrong: the last that mentions an error, else the last."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    flagged = [line for line in lines if any(word in line.lower() for word in ("error", "exception", "failed", "not found"))]
    return (flagged or lines or [""])[-1]


def doctor(spec: ScaffoldSpec, plugin: str, config_for: Callable[[dict[str, Any]], Any], *, model: Path | None = None,
           backend: str = "local", timeout_s: float = 300.0, on_check: Callable[[Check], None] | None = None) -> list[Check]:
    """Every check of the module's list, in order (a white-box scaffold: registered only) (``on_check`` sees each as it is made); ``config_for``
    builds the run's configuration from the smoke overrides (the CLI's layers plus these)."""
    checks: list[Check] = []

    def add(check: Check) -> None:
        checks.append(check)
        if on_check is not None:
            on_check(check)

    for check in static_checks(spec, plugin, backend):
        add(check)
    if spec.kind == "white":
        add(Check("one task", None, f"a loop that runs inside Forge: `forge rollout --scaffold {spec.name}` runs it"))
        return checks
    failed = [c.name for c in checks if c.ok is False]
    if failed:
        add(Check("one task", None, f"{', '.join(failed)} failed"))
        return checks
    with tempfile.TemporaryDirectory(prefix="forge-doctor-") as runs:
        try:
            config = config_for(smoke_overrides(model, backend, Path(runs)))
            add(asyncio.run(one_task(config, spec.name, timeout_s)))
        except ForgeError as exc:
            add(Check("one task", False, str(exc)))
    return checks

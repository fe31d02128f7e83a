"""The rollout driver: tasks → admission → a gateway session per trajectory → the scaffold's run
→ verify → rewards → the trajectory finished in the pool (DESIGN.md §10).

It never touches token ids: the gateway records every call of every trajectory; the driver only
opens the sessions, runs the scaffolds, and writes outcomes, rewards and events. A trajectory
whose scaffold crashes, hangs or overruns its budget becomes a failed or timed-out trajectory
with its partial completions kept, and the rollout goes on. Cancelled (Ctrl-C), every trajectory
it started or queued is failed as "interrupted": nothing is left ``running``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from forge_cli.errors import ForgeError

if TYPE_CHECKING:
    from forge_cli.gateway.server import Gateway
    from forge_cli.specs import ScaffoldSpec
    from forge_cli.tasks.types import Outcome, Task, TaskSuite


@dataclass(frozen=True)
class RolloutRequest:
    """What to roll out: ``groups`` tasks of ``suite``'s ``split``, ``n`` trajectories each."""

    scaffold: str
    suite: str  # a registered suite's name, or a JSONL file of tasks (with ``verifier``)
    verifier: str | None = None
    split: str = "train"
    groups: int = 4
    n: int = 8
    concurrency: int = 8
    trajectory_timeout_s: float = 600.0
    max_tokens_per_trajectory: int | None = None
    seed: int = 0
    executor: str = "local"  # a name in forge_cli.rollout.executors.EXECUTORS
    ray_address: str | None = None
    gateway_url: str | None = None  # a running `forge gateway serve` instead of an in-process one
    admin_key: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class TrajectoryResult:
    """One finished trajectory, as the summary counts it."""

    trajectory_id: str
    group_id: str
    task_id: str
    status: str  # completed | failed | timed_out
    score: float | None
    reason: str
    wall_s: float
    events: int
    rewards: dict[str, float] = field(default_factory=dict)


@dataclass
class Progress:
    """Live counts for a display; ``on_progress`` is called with it after every change."""

    total: int
    running: int = 0
    completed: int = 0
    failed: int = 0
    timed_out: int = 0
    solved: int = 0
    output_tokens: int = 0  # sampled by the trajectories that have ended
    started_at: float = field(default_factory=time.monotonic)
    results: list[TrajectoryResult] = field(default_factory=list)

    @property
    def finished(self) -> int:
        return self.completed + self.failed + self.timed_out


class _Run:
    """One rollout's state: the gateway, the pool, the chosen scaffold and suite, its workdirs."""

    def __init__(self, gw: "Gateway", config: Any, request: RolloutRequest, spec: "ScaffoldSpec", suite: "TaskSuite",
                 progress: Progress, on_progress: Callable[[Progress], None] | None, consumer: bool = False) -> None:
        self.gw, self.pool, self.config, self.request = gw, gw.pool, config, request
        self.spec, self.suite, self.progress, self.on_progress = spec, suite, progress, on_progress
        self.options = config.scaffolds.get(spec.name, {})
        self.consumer = consumer
        self.slots = asyncio.Semaphore(request.concurrency)  # trajectories running at once
        # admission: at most max_active_groups groups are generating; nothing consumes them in a
        # rollout alone, so the bound counts unfinished groups (forge train's consumer frees slots itself)
        self.admitted = asyncio.Semaphore(config.pool.max_active_groups if not consumer else 1_000_000)
        self.submitting = asyncio.Lock()  # one at a time, in task order: the queue's order is the tasks'
        self.mine: set[str] = set()  # trajectories this driver submitted and has not ended
        self.pending: set[str] = set()  # groups submitted whose rewards are not written yet
        from forge_cli.rollout.executors import make_executor

        self.executor = make_executor(request.executor, spec, suite, address=request.ray_address,
                                      sandbox_options=config.sandboxes.get("local"))

    def tell(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.progress)

    def submit(self, task: "Task") -> Any:
        """Submit a task's group, held back from the scheduler until its rewards are written. With a
        consumer (``forge train``) the pool's own bound admits it: at most ``max_active_groups``
        submitted and not yet trained on (PoolFull: the caller waits)."""
        group = self.pool.submit_group(task.id, self.request.n, self.spec.name, timeout_s=self.config.pool.group_timeout_s,
                                       rewards_pending=True,
                                       max_active=self.config.pool.max_active_groups if self.consumer else None)
        self.mine.update(t.id for t in group.trajectories)  # here, in the same thread: a cancel cannot lose them
        self.pending.add(group.id)
        return group

    async def group(self, task: "Task") -> list[TrajectoryResult]:
        from forge_cli.pool import PoolFull

        async with self.admitted:
            async with self.submitting:
                while True:
                    try:
                        group = await asyncio.to_thread(self.submit, task)
                        break
                    except PoolFull:  # back-pressure: the trainer has not taken enough yet
                        await asyncio.sleep(0.2)
            async with asyncio.TaskGroup() as members:  # one that raises cancels its siblings
                runs = [members.create_task(self.trajectory(task, group.id, t.id)) for t in group.trajectories]
            return await asyncio.to_thread(self.reward, group.id, task, [run.result() for run in runs])

    def reward(self, group_id: str, task: "Task", ended: list[tuple["TrajectoryResult", "Outcome | None"]]) -> list[TrajectoryResult]:
        """The group's rewards (DESIGN §6: each component, reward-to-go, group-normalised advantages
        per completion), written in one transaction; then the scheduler may hand the group out."""
        from dataclasses import replace

        from forge_cli.rewards.group import apply_group_rewards

        outcomes = {r.trajectory_id: outcome for r, outcome in ended if outcome is not None}
        texts = {t.id: [self.gw.output_text(c.output_ids) for c in t.completions] for t in self.pool.group(group_id).trajectories}
        tools = [tool.schema() for tool in self.suite.tools(task, self.gw.run_dir / "work" / "schemas")]
        try:
            result = apply_group_rewards(self.pool, group_id, outcomes=outcomes, settings=self.config.rewards,
                                         texts=texts, tools=tools)
        except ForgeError:
            if self.pool.group(group_id).status.value == "active":
                raise  # not because the scheduler dropped it: a real fault
            return [r for r, _ in ended]  # the group timed out and was dropped meanwhile
        finally:
            self.pending.discard(group_id)
        return [replace(r, rewards=result.of(r.trajectory_id).components) for r, _ in ended]

    async def trajectory(self, task: "Task", group_id: str, trajectory_id: str) -> tuple[TrajectoryResult, "Outcome | None"]:
        from forge_cli.rollout.executors import AgentTimedOut

        async with self.slots:
            started = time.monotonic()
            status, outcome, reason, events, session = "failed", None, "", [], None
            self.progress.running += 1
            self.tell()
            try:
                await asyncio.to_thread(self.pool.start_trajectory, trajectory_id)
                session = await self.gw.open_session(task_id=task.id, scaffold=self.spec.name, trajectory_id=trajectory_id,
                                                      tool_format=self.spec.tool_format, training=True,
                                                      token_budget=self.request.max_tokens_per_trajectory)
                # a black-box program is killed at the budget by its sandbox; this is the backstop
                budget = self.request.trajectory_timeout_s + (0 if self.spec.kind == "white" else 15)
                _, events, outcome = await asyncio.wait_for(self.run_scaffold(task, trajectory_id, session), timeout=budget)
                status, reason = "completed", outcome.reason
            except (asyncio.TimeoutError, AgentTimedOut) as exc:
                status, reason = "timed_out", str(exc) or f"over its time budget of {self.request.trajectory_timeout_s:g} s"
            except ForgeError as exc:
                reason = str(exc)
            except Exception as exc:  # a crashing scaffold is a failed trajectory, never a crashed rollout
                reason = f"{type(exc).__name__}: {exc}"
            finally:
                if session is not None:  # its history is not needed any more
                    self.progress.output_tokens += await asyncio.shield(self.gw.close_session(session.id))
                self.progress.running -= 1
            result = await asyncio.to_thread(self.end, trajectory_id, group_id, task, status, outcome, reason, events,
                                             time.monotonic() - started)
            setattr(self.progress, result.status, getattr(self.progress, result.status) + 1)
            self.progress.solved += bool(result.score is not None and result.score >= 1.0)
            self.tell()
            return result, outcome

    async def run_scaffold(self, task: "Task", trajectory_id: str, session: Any) -> tuple[Any, list[Any], "Outcome"]:
        """Run the scaffold in the trajectory's session on the executor, and verify: ``(Transcript, events, Outcome)``."""
        from forge_cli.rollout.executors import Job

        job = Job(scaffold=self.spec.name, suite=self.request.suite, verifier=self.request.verifier, task=task,
                  workdir=str(self.gw.run_dir / "work" / trajectory_id), base_url=session.base_url, api_key=session.api_key,
                  model=self.gw.model_name, timeout_s=self.request.trajectory_timeout_s, options=dict(self.options))
        return await self.executor.run(job)

    def end(self, trajectory_id: str, group_id: str, task: "Task", status: str, outcome: "Outcome | None", reason: str,
            events: list[Any], wall_s: float) -> TrajectoryResult:
        """Write the trajectory's events and end it (in a worker thread: the pool is blocking); its
        rewards come with its group's (:meth:`reward`). One that ended already (its group timed out)
        keeps the status it has."""
        try:
            if events:
                self.pool.append_events(trajectory_id, events)
            if status == "completed":
                self.pool.finish_trajectory(trajectory_id)
            else:
                self.pool.fail_trajectory(trajectory_id, reason or status, timed_out=status == "timed_out")
        except ForgeError as exc:
            now = self.pool.trajectory_status(trajectory_id) or "failed"
            status, reason = (now, reason or str(exc)) if now in ("completed", "failed", "timed_out") else ("failed", str(exc))
        self.mine.discard(trajectory_id)
        return TrajectoryResult(trajectory_id, group_id, task.id, status, outcome.score if outcome else None, reason, wall_s,
                                len(events))

    def interrupt(self) -> int:
        """Fail, as "interrupted", every trajectory of this rollout that is not over, and release its
        groups to the scheduler (as they are, rewarded or not); how many trajectories."""
        failed = 0
        for trajectory_id in sorted(self.mine):
            try:
                self.pool.fail_trajectory(trajectory_id, "interrupted")
                failed += 1
            except ForgeError:  # it ended meanwhile
                pass
        for group_id in sorted(self.pending):
            try:
                self.pool.set_completion_rewards(group_id, [])
            except ForgeError:  # dropped meanwhile
                pass
        self.mine.clear()
        self.pending.clear()
        return failed


async def rollout(config: Any, request: RolloutRequest, *, run: str | None = None, gateway: "Gateway | None" = None,
                  on_progress: Callable[[Progress], None] | None = None, consumer: bool = False) -> "RolloutSummary":
    """Roll ``request`` out and return its summary. ``gateway``: a running in-process gateway to use
    (default: ``request.gateway_url``'s running gateway, recording into the run ``run``; else one is
    served for the run ``run`` for the rollout's length). ``consumer``: a trainer takes the groups
    (``forge train``), so admission is the pool's ``max_active_groups`` over groups not yet trained on."""
    from forge_cli.plugins import get_registry
    from forge_cli.rollout.summary import summarize

    registry = get_registry()
    spec = registry.scaffold(request.scaffold)
    suite = resolve_suite(request.suite, request.verifier, registry)
    if request.groups < 1 or request.n < 1 or request.concurrency < 1:
        raise ForgeError("groups, n and concurrency must each be at least 1")
    tasks = suite.make(request.split, request.groups, request.seed)
    preflight(config, request, spec, registry)
    if gateway is None and request.gateway_url:
        from forge_cli.rollout.remote import RemoteGateway

        remote = await RemoteGateway.connect(config, request.gateway_url, request.admin_key or "", run)
        try:
            return await rollout(config, request, gateway=remote, on_progress=on_progress, consumer=consumer)
        finally:
            await remote.close()
    if gateway is None:
        from forge_cli.gateway.server import serve_gateway

        async with serve_gateway(config, run) as gw:
            return await rollout(config, request, gateway=gw, on_progress=on_progress, consumer=consumer)
    progress = Progress(total=len(tasks) * request.n)
    state = _Run(gateway, config, request, spec, suite, progress, on_progress, consumer)
    started = time.monotonic()
    try:
        async with asyncio.TaskGroup() as groups:  # a group that fails cancels the others: nothing runs on unseen
            runs = [groups.create_task(state.group(task)) for task in tasks]
        for run in runs:
            progress.results.extend(run.result())
    except BaseException:
        await asyncio.shield(asyncio.to_thread(state.interrupt))
        raise
    finally:
        state.executor.close()
    return await asyncio.to_thread(summarize, gateway.pool, progress.results, time.monotonic() - started, request,
                                   gateway.run_dir, {task.id: task.difficulty for task in tasks})


def preflight(config: Any, request: RolloutRequest, spec: "ScaffoldSpec", registry: Any) -> None:
    """What would fail every trajectory alike fails the rollout now, before anything is recorded:
    a loop that does not resolve or options it refuses, an agent not installed, reward weights
    naming no component, a Ray cluster that could not reach a loopback gateway."""
    from forge_cli.config import validate_options
    from forge_cli.gateway.server import LOOPBACK
    from forge_cli.rewards.group import _components

    if spec.kind == "white":
        from forge_cli.rollout.loop import resolve_loop

        resolve_loop(spec)
        validate_options(spec.options, config.scaffolds.get(spec.name, {}), f"[scaffolds.{spec.name}]")
    else:
        from forge_cli.rollout.blackbox import find_install

        find_install(spec)
    _components(registry.rewards, config.rewards)
    if (request.executor == "ray" and request.ray_address and not request.gateway_url
            and config.gateway.host in LOOPBACK):
        raise ForgeError(f"a Ray cluster at {request.ray_address} cannot reach a gateway on {config.gateway.host}: "
                         "serve it on an address the workers reach (gateway.host, with gateway.auth = strict)")


def resolve_suite(name: str, verifier: str | None, registry: Any) -> "TaskSuite":
    """A registered suite by name, or a JSONL file of tasks with its verifier (``module:function``)."""
    from forge_cli.tasks import load_user_suite, task_suite

    if name.endswith(".jsonl") or Path(name).is_file():
        if not verifier:
            raise ForgeError(f"the task file {name} needs a verifier: --verifier module:function")
        return load_user_suite(Path(name), verifier)
    if verifier:
        raise ForgeError(f"--verifier is for a JSONL task file; the suite {name!r} has its own")
    return task_suite(name, registry)

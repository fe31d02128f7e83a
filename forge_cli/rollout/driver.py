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
    seed: int = 0
    executor: str = "local"  # a name in forge_cli.rollout.executors.EXECUTORS
    ray_address: str | None = None


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
    started_at: float = field(default_factory=time.monotonic)
    results: list[TrajectoryResult] = field(default_factory=list)

    @property
    def finished(self) -> int:
        return self.completed + self.failed + self.timed_out


class _Run:
    """One rollout's state: the gateway, the pool, the chosen scaffold and suite, its workdirs."""

    def __init__(self, gw: "Gateway", config: Any, request: RolloutRequest, spec: "ScaffoldSpec", suite: "TaskSuite",
                 progress: Progress, on_progress: Callable[[Progress], None] | None) -> None:
        self.gw, self.pool, self.config, self.request = gw, gw.pool, config, request
        self.spec, self.suite, self.progress, self.on_progress = spec, suite, progress, on_progress
        self.options = config.scaffolds.get(spec.name, {})
        self.slots = asyncio.Semaphore(request.concurrency)  # trajectories running at once
        # admission: at most max_active_groups groups are generating; nothing consumes them in a
        # rollout alone, so the bound counts unfinished groups (forge train's consumer frees slots itself)
        self.admitted = asyncio.Semaphore(config.pool.max_active_groups)
        self.submitting = asyncio.Lock()  # one at a time, in task order: the queue's order is the tasks'
        self.mine: set[str] = set()  # trajectories this driver submitted and has not ended
        from forge_cli.rollout.executors import make_executor

        self.executor = make_executor(request.executor, spec, suite, address=request.ray_address)

    def tell(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.progress)

    async def group(self, task: "Task") -> list[TrajectoryResult]:
        async with self.admitted:
            async with self.submitting:
                # held back from the scheduler until its rewards are written (rewards_pending)
                group = await asyncio.to_thread(lambda: self.pool.submit_group(
                    task.id, self.request.n, self.spec.name, timeout_s=self.request.trajectory_timeout_s * 2,
                    rewards_pending=True))
                ids = [t.id for t in group.trajectories]
                self.mine.update(ids)
            ended = list(await asyncio.gather(*(self.trajectory(task, group.id, tid) for tid in ids)))
            return await asyncio.to_thread(self.reward, group.id, task, ended)

    def reward(self, group_id: str, task: "Task", ended: list[tuple["TrajectoryResult", "Outcome | None"]]) -> list[TrajectoryResult]:
        """The group's rewards (DESIGN §6: each component, reward-to-go, group-normalised advantages
        per completion), written in one transaction; then the scheduler may hand the group out."""
        from dataclasses import replace

        from forge_cli.rewards.group import apply_group_rewards

        outcomes = {r.trajectory_id: outcome for r, outcome in ended if outcome is not None}
        decode = self.gw.state.tokenizer.decode
        texts = {t.id: [decode(c.output_ids, skip_special_tokens=True) for c in t.completions]
                 for t in self.pool.group(group_id).trajectories}
        tools = [tool.schema() for tool in self.suite.tools(task, self.gw.run_dir / "work" / "schemas")]
        try:
            result = apply_group_rewards(self.pool, group_id, outcomes=outcomes, settings=self.config.rewards,
                                         texts=texts, tools=tools)
        except ForgeError:  # e.g. the group timed out and was dropped meanwhile: its trajectories keep what they have
            return [r for r, _ in ended]
        return [replace(r, rewards=result.of(r.trajectory_id).components) for r, _ in ended]

    async def trajectory(self, task: "Task", group_id: str, trajectory_id: str) -> tuple[TrajectoryResult, "Outcome | None"]:
        async with self.slots:
            await asyncio.to_thread(self.pool.start_trajectory, trajectory_id)
            self.progress.running += 1
            self.tell()
            started = time.monotonic()
            workdir = self.gw.run_dir / "work" / trajectory_id
            status, outcome, reason, events = "failed", None, "", []
            try:
                session = await self.gw.open_session(task_id=task.id, scaffold=self.spec.name, trajectory_id=trajectory_id,
                                                      tool_format=self.spec.tool_format, training=True)
                # a black-box program is killed at the budget by its sandbox; this is the backstop
                budget = self.request.trajectory_timeout_s + (0 if self.spec.kind == "white" else 15)
                transcript, events = await asyncio.wait_for(self.run_scaffold(task, workdir, session), timeout=budget)
                outcome = await asyncio.to_thread(self.suite.verifier.verify, task, workdir, transcript)
                status, reason = "completed", outcome.reason
            except asyncio.TimeoutError:
                status, reason = "timed_out", f"over its time budget of {self.request.trajectory_timeout_s:g} s"
            except ForgeError as exc:
                reason = str(exc)
            except Exception as exc:  # a crashing scaffold is a failed trajectory, never a crashed rollout
                reason = f"{type(exc).__name__}: {exc}"
            result = await asyncio.to_thread(self.end, trajectory_id, group_id, task, status, outcome, reason, events,
                                             time.monotonic() - started)
            self.progress.running -= 1
            setattr(self.progress, result.status, getattr(self.progress, result.status) + 1)
            self.progress.solved += bool(result.score is not None and result.score >= 1.0)
            self.tell()
            return result, outcome

    async def run_scaffold(self, task: "Task", workdir: Path, session: Any) -> tuple[Any, list[Any]]:
        """Run the scaffold in the trajectory's session, on the executor: ``(Transcript, events)``."""
        from forge_cli.rollout.executors import Job

        job = Job(scaffold=self.spec.name, suite=self.request.suite, verifier=self.request.verifier, task=task,
                  workdir=str(workdir), base_url=session.base_url, api_key=session.api_key, model=self.gw.state.model_name,
                  timeout_s=self.request.trajectory_timeout_s, options=dict(self.options))
        return await self.executor.run(job)

    def end(self, trajectory_id: str, group_id: str, task: "Task", status: str, outcome: "Outcome | None", reason: str,
            events: list[Any], wall_s: float) -> TrajectoryResult:
        """Write the trajectory's events and end it (in a worker thread: the pool is blocking); its
        rewards come with its group's (:meth:`reward`)."""
        if events:
            self.pool.append_events(trajectory_id, events)
        if status == "completed":
            self.pool.finish_trajectory(trajectory_id)
        else:
            self.pool.fail_trajectory(trajectory_id, reason or status, timed_out=status == "timed_out")
        self.mine.discard(trajectory_id)
        return TrajectoryResult(trajectory_id, group_id, task.id, status, outcome.score if outcome else None, reason, wall_s,
                                len(events))

    def interrupt(self) -> int:
        """Fail, as "interrupted", every trajectory of this rollout that is not over; how many."""
        failed = 0
        for trajectory_id in sorted(self.mine):
            try:
                self.pool.fail_trajectory(trajectory_id, "interrupted")
                failed += 1
            except ForgeError:  # it ended meanwhile
                pass
        self.mine.clear()
        return failed


async def rollout(config: Any, request: RolloutRequest, *, run: str | None = None, gateway: "Gateway | None" = None,
                  on_progress: Callable[[Progress], None] | None = None) -> "RolloutSummary":
    """Roll ``request`` out and return its summary. ``gateway``: a running in-process gateway to use
    (default: one is served for the run ``run`` for the rollout's length)."""
    from forge_cli.plugins import get_registry
    from forge_cli.rollout.summary import summarize

    registry = get_registry()
    spec = registry.scaffold(request.scaffold)
    suite = resolve_suite(request.suite, request.verifier, registry)
    if request.groups < 1 or request.n < 1 or request.concurrency < 1:
        raise ForgeError("groups, n and concurrency must each be at least 1")
    tasks = suite.make(request.split, request.groups, request.seed)
    if gateway is None:
        from forge_cli.gateway.server import serve_gateway

        async with serve_gateway(config, run) as gw:
            return await rollout(config, request, gateway=gw, on_progress=on_progress)
    progress = Progress(total=len(tasks) * request.n)
    state = _Run(gateway, config, request, spec, suite, progress, on_progress)
    started = time.monotonic()
    try:
        for rewarded in await asyncio.gather(*(state.group(task) for task in tasks)):
            progress.results.extend(rewarded)
    except BaseException:
        await asyncio.shield(asyncio.to_thread(state.interrupt))
        raise
    finally:
        state.executor.close()
    return await asyncio.to_thread(summarize, gateway.pool, progress.results, time.monotonic() - started, request,
                                   gateway.run_dir, {task.id: task.difficulty for task in tasks})


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

"""The rollout driver: tasks → admission → a gateway session per trajectory → the scaffold's run
→ verify → rewards → the trajectory finished in the pool (DESIGN.md §10).

The tasks come from a :class:`~forge_cli.rollout.stream.TaskStream` (one suite or a weighted mix,
seeded, resumable at any group index), drawn lazily: a group exists only once admission lets it
in, so an unbounded stream (``forge train``, ``groups=None``) holds no more than the pool admits.

It never touches token ids: the gateway records every call of every trajectory; the driver only
opens the sessions, runs the scaffolds, and writes outcomes, rewards and events. A trajectory
whose scaffold crashes, hangs or overruns its budget becomes a failed or timed-out trajectory
with its partial completions kept, and the rollout goes on. Cancelled (Ctrl-C), every trajectory
it started or queued is failed as "interrupted": nothing is left ``running``.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from forge_cli.configs.common import validate_options
from forge_cli.errors import ForgeError, InfraError
from forge_cli.plugins import get_registry
from forge_cli.pool.scheduler import Scheduler
from forge_cli.pool.store import PoolFull
from forge_cli.records.session import SessionRequest
from forge_cli.rewards.group import active_components, apply_group_rewards
from forge_cli.rollout.blackbox import find_install
from forge_cli.rollout.executors import AgentTimedOut, Job, make_executor
from forge_cli.rollout.loop import resolve_loop
from forge_cli.rollout.records import RolloutRequest, TrajectoryResult
from forge_cli.rollout.stream import TaskStream, check_mix, turns
from forge_cli.rollout.summary import summarize_rollout
from forge_cli.tasks.suites import resolve_suite

if TYPE_CHECKING:
    from forge_cli.rollout.remote import DriverGateway
    from forge_cli.rollout.summary import RolloutSummary
    from forge_cli.specs import ScaffoldSpec
    from forge_cli.tasks.types import Outcome, Task, TaskSuite


@dataclass
class SuiteCount:
    """One suite's share of a rollout so far."""

    finished: int = 0
    solved: int = 0


@dataclass
class RolloutProgress:
    """Live counts for a display; ``on_progress`` is called with it after every change. ``total`` is
    None for an unbounded stream."""

    total: int | None
    running: int = 0
    completed: int = 0
    failed: int = 0
    timed_out: int = 0
    infra: int = 0  # of the failed and timed out: infrastructure failures (their groups dropped, not trained)
    retried: int = 0  # trajectories that ran again after an infrastructure failure
    dropped_groups: int = 0  # groups dropped for an infrastructure failure
    solved: int = 0
    output_tokens: int = 0  # sampled by the trajectories that have ended
    started_at: float = field(default_factory=time.monotonic)
    results: list[TrajectoryResult] = field(default_factory=list)
    by_suite: dict[str, SuiteCount] = field(default_factory=dict)
    difficulty: dict[str, str] = field(default_factory=dict)  # task id -> difficulty, of every task drawn

    @property
    def finished(self) -> int:
        return self.completed + self.failed + self.timed_out

    def count(self, result: TrajectoryResult) -> None:
        """One more trajectory ended."""
        setattr(self, result.status, getattr(self, result.status) + 1)
        self.infra += result.infra is not None
        self.retried += result.attempts > 1
        self.solved += result.solved
        suite = self.by_suite.setdefault(result.suite, SuiteCount())
        suite.finished += 1
        suite.solved += result.solved


@dataclass
class Attempt:
    """How one run of a trajectory's scaffold ended: ``status`` completed | failed | timed_out, the
    verifier's ``outcome`` (completed only), ``reason``, the scaffold's ``events``, and ``infra`` —
    the cause when it failed for a reason its policy could not cause (``pool.types.INFRA_CAUSES``)."""

    status: str
    outcome: "Outcome | None"
    reason: str
    events: list[Any]
    infra: str | None


class _Rollout:
    """One rollout's state: the gateway, the pool, the chosen scaffolds and suites, its workdirs."""

    def __init__(self, gw: "DriverGateway", config: Any, request: RolloutRequest, specs: dict[str, "ScaffoldSpec"],
                 suites: dict[str, "TaskSuite"], progress: RolloutProgress, on_progress: Callable[[RolloutProgress], None] | None,
                 consumer: bool = False) -> None:

        self.gw, self.pool, self.config, self.request = gw, gw.pool, config, request
        self.specs, self.suites, self.progress, self.on_progress = specs, suites, progress, on_progress
        self.options = {name: config.scaffolds.get(name, {}) for name in specs}
        self.consumer = consumer
        self.slots = asyncio.Semaphore(request.concurrency)  # trajectories running at once
        # admission: at most max_active_groups groups are generating; nothing consumes them in a
        # rollout alone, so the bound counts unfinished groups (forge train's consumer frees slots
        # itself, and the pool counts them: the scheduler's bound, a staleness cap's too)
        self.admitted = asyncio.Semaphore(config.pool.max_active_groups) if not consumer else None
        self.scheduler = Scheduler.from_config(config.pool, config.train.groups_per_step)
        # the version the rollout engine serves, as the trainer publishes it into the pool after each weight push
        # (a gateway in this process or another: neither hands the driver its engine)
        self.version: Callable[[], int] = self.pool.published_version
        self.start_version = self.version()  # groups already in the pool count as submitted now
        self.submitted_at: dict[int, int] = {}  # queue index -> the engine's version when it was submitted
        self.difficulty: dict[str, str] = progress.difficulty  # task id -> difficulty, for the summary
        self.done: dict[int, list[TrajectoryResult]] = {}  # group index in the stream -> its results
        self.mine: set[str] = set()  # trajectories this driver submitted and has not ended
        self.pending: set[str] = set()  # groups submitted whose rewards are not written yet
        self.guard = threading.Lock()  # a submit and the interrupt never interleave
        self.closed = False  # interrupted: nothing more is submitted

        self.executors: dict[tuple[str, str], Any] = {}  # (suite key, scaffold) -> where its jobs run
        try:
            for key, suite in suites.items():
                for name, spec in specs.items():
                    self.executors[key, name] = make_executor(
                        request.executor, spec, suite, address=request.ray_address,
                        sandbox_options=config.sandboxes.get(sandbox_of(config, name)))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for executor in reversed(list(self.executors.values())):  # the first one started Ray: it stops it last
            executor.close()

    def tell(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.progress)

    def submit(self, task: "Task", scaffold: str) -> Any:
        """Submit a task's group, held back from the scheduler until its rewards are written. With a
        consumer (``forge train``) the pool's own bound admits it: the scheduler's (at most
        ``max_active_groups`` submitted and not yet trained on, tighter under a staleness cap) —
        PoolFull: the caller waits. In a worker thread: the pool is blocking."""
        with self.guard:  # here, with the interrupt excluded: a cancel cannot lose the group
            if self.closed:
                raise ForgeError("the rollout was interrupted")
            if self.consumer:
                version = self.version()
                head = self.scheduler.head(self.pool)
                head_version = None if head is None else self.submitted_at.get(head, self.start_version)
                group = self.scheduler.submit(self.pool, task.id, self.request.n, scaffold, version=version,
                                              head_version=head_version, rewards_pending=True)
                self.submitted_at[group.queue_index] = version
            else:
                group = self.pool.submit_group(task.id, self.request.n, scaffold, rewards_pending=True,
                                               timeout_s=self.config.pool.group_timeout_s,
                                               evaluation=self.request.evaluation)
            self.mine.update(t.id for t in group.trajectories)
            self.pending.add(group.id)
        return group

    async def admit(self, task: "Task", scaffold: str) -> Any:
        """The task's group, submitted once admission lets it in."""
        while True:
            try:
                return await asyncio.to_thread(self.submit, task, scaffold)
            except PoolFull:  # back-pressure: the trainer has not taken enough yet
                await asyncio.sleep(0.2)

    async def spawn(self, groups: asyncio.TaskGroup, stream: "TaskStream") -> None:
        """Draw the stream's tasks one at a time, in order, each once admission lets its group in: no
        more groups exist at once than admission allows, however long the stream. Each group's scaffold
        is the scaffold mix's turn for its index (one scaffold: always it)."""
        index = stream.first
        scaffolds = turns(self.request.scaffolds, stream.first)
        while True:
            if self.admitted is not None:
                await self.admitted.acquire()
            try:
                item = await asyncio.to_thread(next, stream, None)  # a new chunk of tasks is drawn off the loop
                if item is None:
                    return
                key, task = item
                scaffold = next(scaffolds)
                self.difficulty[task.id] = task.difficulty
                group = await self.admit(task, scaffold)
            except BaseException:
                if self.admitted is not None:
                    self.admitted.release()
                raise
            groups.create_task(self.group(index, key, scaffold, task, group))
            index += 1

    async def group(self, index: int, key: str, scaffold: str, task: "Task", group: Any) -> None:
        try:
            async with asyncio.TaskGroup() as members:  # one that raises cancels its siblings
                runs = [members.create_task(self.trajectory(key, scaffold, task, group.id, t.id)) for t in group.trajectories]
            self.done[index] = await asyncio.to_thread(self.reward, group.id, key, task, [run.result() for run in runs])
        finally:
            if self.admitted is not None:
                self.admitted.release()

    def reward(self, group_id: str, key: str, task: "Task",
               ended: list[tuple["TrajectoryResult", "Outcome | None"]]) -> list[TrajectoryResult]:
        """The group's rewards (DESIGN §6: each component, reward-to-go, group-normalised advantages
        per completion), written in one transaction; then the scheduler may hand the group out."""
        broken = next((r for r, _ in ended if r.infra is not None), None)
        if broken is not None:  # never trained as a reward of 0: the group goes, with the reason
            try:
                self.pool.drop_group(group_id, f"infrastructure failure ({broken.infra}) of trajectory "
                                               f"{broken.trajectory_id}: {broken.reason}"[:4000])
                self.progress.dropped_groups += 1
            except ForgeError:  # it timed out and was dropped meanwhile
                pass
            finally:
                self.pending.discard(group_id)
            return [r for r, _ in ended]
        outcomes = {r.trajectory_id: outcome for r, outcome in ended if outcome is not None}
        texts = {t.id: [self.gw.output_text(c.output_ids) for c in t.completions] for t in self.pool.group(group_id).trajectories}
        tools = [tool.schema() for tool in self.suites[key].tools(task, self.gw.run_dir / "work" / "schemas")]
        try:
            result = apply_group_rewards(self.pool, group_id, outcomes=outcomes, settings=self.config.rewards,
                                         texts=texts, tools=tools)
        except ForgeError:
            if self.pool.group(group_id).status.value in ("active", "evaluation"):
                raise  # not because the scheduler dropped it: a real fault
            return [r for r, _ in ended]  # the group timed out and was dropped meanwhile
        finally:
            self.pending.discard(group_id)
        return [replace(r, rewards=result.of(r.trajectory_id).components) for r, _ in ended]

    async def trajectory(self, key: str, scaffold: str, task: "Task", group_id: str,
                         trajectory_id: str) -> tuple[TrajectoryResult, "Outcome | None"]:
        """Run one trajectory to its end. One that fails for a reason its policy could not cause
        (:class:`~forge_cli.errors.InfraError`, or any failure before its first model call) runs again
        afresh, up to ``infra_retries`` times, while it has recorded nothing; each retry is an event."""
        async with self.slots:
            started = time.monotonic()
            ran = Attempt("failed", None, "", [], None)
            retries: list[dict[str, Any]] = []
            self.progress.running += 1
            self.tell()
            try:
                await asyncio.to_thread(self.pool.start_trajectory, trajectory_id)
                while True:
                    ran = await self.attempt(key, scaffold, task, trajectory_id)
                    if ran.infra is None or len(retries) >= self.request.infra_retries:
                        break
                    if await asyncio.to_thread(self.pool.completion_count, trajectory_id):
                        break  # it recorded completions: it cannot start afresh under the same id
                    retries.append({"kind": "infra-retry", "at": time.time(),
                                    "data": {"attempt": len(retries) + 1, "cause": ran.infra, "reason": ran.reason}})
                    await asyncio.to_thread(shutil.rmtree, self.gw.run_dir / "work" / trajectory_id, True)
            except ForgeError as exc:  # the pool refused to start it (its group timed out meanwhile)
                ran = Attempt("failed", None, str(exc), [], None)
            finally:
                self.progress.running -= 1
            result = await asyncio.to_thread(self.end, trajectory_id, group_id, key, scaffold, task, ran,
                                             retries + ran.events, time.monotonic() - started, len(retries) + 1)
            self.progress.count(result)
            self.tell()
            return result, ran.outcome

    async def attempt(self, key: str, scaffold: str, task: "Task", trajectory_id: str) -> "Attempt":
        """One run of the scaffold in a session of its own, and how it ended."""
        status, outcome, reason, events, infra, session = "failed", None, "", [], None, None
        spec = self.specs[scaffold]
        try:
            session = await self.gw.open_session(SessionRequest(
                task_id=task.id, scaffold=spec.name, trajectory_id=trajectory_id, tool_format=spec.tool_format,
                training=True, token_budget=self.request.max_tokens_per_trajectory))
            # a black-box program is killed at the budget by its sandbox; this is the backstop
            budget = self.request.trajectory_timeout_s + (0 if spec.kind == "white" else 15)
            _, events, outcome = await asyncio.wait_for(self.run_scaffold(key, scaffold, task, trajectory_id, session),
                                                        timeout=budget)
            status, reason = "completed", outcome.reason
        except (asyncio.TimeoutError, AgentTimedOut) as exc:
            status, reason = "timed_out", str(exc) or f"over its time budget of {self.request.trajectory_timeout_s:g} s"
            events = list(getattr(exc, "events", ()))
        except InfraError as exc:
            reason, infra, events = str(exc), exc.cause, list(getattr(exc, "events", ()))
        except ForgeError as exc:
            reason, events = str(exc), list(getattr(exc, "events", ()))
        except Exception as exc:  # a crashing scaffold is a failed trajectory, never a crashed rollout
            reason = f"{type(exc).__name__}: {exc}"
        finally:
            if session is not None:  # its history is not needed any more
                self.progress.output_tokens += await asyncio.shield(self.gw.close_session(session.id))
        if status != "completed" and infra is None and session is not None \
                and not await asyncio.to_thread(self.pool.completion_count, trajectory_id):
            # it ended before its policy was ever asked for anything: nothing of the policy's to blame
            infra, reason = "launch", f"ended before its first model call: {reason}"
        return Attempt(status, outcome, reason, events, infra)

    async def run_scaffold(self, key: str, scaffold: str, task: "Task", trajectory_id: str,
                           session: Any) -> tuple[Any, list[Any], "Outcome"]:
        """Run the scaffold in the trajectory's session on the executor, and verify: ``(Transcript, events, Outcome)``."""
        job = Job(scaffold=scaffold, suite=key, verifier=self.request.verifier, task=task,
                  workdir=str(self.gw.run_dir / "work" / trajectory_id), base_url=session.base_url, api_key=session.api_key,
                  model=self.gw.model_name, timeout_s=self.request.trajectory_timeout_s, options=dict(self.options[scaffold]),
                  sandbox=sandbox_of(self.config, scaffold),
                  gateway_socket=str(self.gw.unix_path) if getattr(self.gw, "unix_path", None) else None)
        return await self.executors[key, scaffold].run(job)

    def end(self, trajectory_id: str, group_id: str, key: str, scaffold: str, task: "Task", ran: "Attempt", events: list[Any],
            wall_s: float, attempts: int) -> TrajectoryResult:
        """Write the trajectory's events (its verification's outcome among them) and end it (in a
        worker thread: the pool is blocking); its rewards come with its group's (:meth:`reward`). One
        that ended already (its group timed out) keeps the status it has."""
        status, reason, infra = ran.status, ran.reason, ran.infra
        if ran.outcome is not None:
            events = [*events, {"kind": "verified", "at": time.time(),
                                "data": {"score": ran.outcome.score, "reason": ran.outcome.reason}}]
        try:
            if events:
                self.pool.append_events(trajectory_id, events)
            if status == "completed":
                self.pool.finish_trajectory(trajectory_id)
            else:
                self.pool.fail_trajectory(trajectory_id, reason or status, timed_out=status == "timed_out", infra=infra)
        except ForgeError as exc:
            now = self.pool.trajectory_status(trajectory_id) or "failed"
            status, reason = (now, reason or str(exc)) if now in ("completed", "failed", "timed_out") else ("failed", str(exc))
        self.mine.discard(trajectory_id)
        return TrajectoryResult(trajectory_id, group_id, task.id, status, ran.outcome.score if ran.outcome else None, reason,
                                wall_s, len(events), suite=key, scaffold=scaffold, infra=infra, attempts=attempts)

    def interrupt(self) -> int:
        """Fail, as "interrupted", every trajectory of this rollout that is not over, and release its
        unrewarded groups as they are — or, with a consumer (``forge train``), drop them, so no trainer
        takes a group that was cut off; how many trajectories. Nothing is submitted after it."""
        failed = 0
        with self.guard:
            self.closed = True
            for trajectory_id in sorted(self.mine):
                try:
                    self.pool.fail_trajectory(trajectory_id, "interrupted")
                    failed += 1
                except ForgeError:  # it ended meanwhile
                    pass
            for group_id in sorted(self.pending):
                try:
                    if self.consumer:  # a trainer would take it: cut off, it must not teach a failure that never was
                        self.pool.drop_group(group_id, "interrupted")
                    else:
                        self.pool.set_completion_rewards(group_id, [])
                except ForgeError:  # dropped meanwhile
                    pass
            self.mine.clear()
            self.pending.clear()
        return failed


async def rollout(config: Any, request: RolloutRequest, *, run: str | None = None, gateway: "DriverGateway | None" = None,
                  on_progress: Callable[[RolloutProgress], None] | None = None, consumer: bool = False) -> "RolloutSummary":
    """Roll ``request`` out and return its summary. ``gateway``: a running in-process gateway to use
    (default: ``request.gateway_url``'s running gateway, recording into the run ``run``; else one is
    served for the run ``run`` for the rollout's length). ``consumer``: a trainer takes the groups
    (``forge train``), so admission is the scheduler's bound over groups not yet trained on (the
    pool's ``max_active_groups``, and a staleness cap's), and ``request.groups`` may be None: then
    the rollout runs until it is cancelled (and fails what it started as "interrupted")."""
    registry = get_registry()
    specs = {name: registry.scaffold(name) for name in check_mix(request.scaffolds, "scaffold mix")}
    if request.groups is None and not consumer:
        raise ForgeError("an unbounded rollout (groups = None) needs a consumer that takes its groups (forge train)")
    if (request.groups is not None and request.groups < 1) or request.n < 1 or request.concurrency < 1:
        raise ForgeError("groups, n and concurrency must each be at least 1")
    if request.first_group < 0:
        raise ForgeError(f"first_group must be >= 0, got {request.first_group}")
    weights = check_mix(request.weights)
    suites = {name: resolve_suite(name, request.verifier, registry) for name in weights}
    stream = TaskStream(suites, weights, request.split, request.seed, first=request.first_group, count=request.groups)  # type: ignore[arg-type]
    for spec in specs.values():
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
    progress = RolloutProgress(total=request.groups * request.n if request.groups is not None else None)
    state = _Rollout(gateway, config, request, specs, suites, progress, on_progress, consumer)
    started = time.monotonic()
    try:
        async with asyncio.TaskGroup() as groups:  # a group that fails cancels the others: nothing runs on unseen
            await state.spawn(groups, stream)
        progress.results.extend(r for index in sorted(state.done) for r in state.done[index])
    except BaseException:
        await asyncio.shield(asyncio.to_thread(state.interrupt))
        raise
    finally:
        state.close()
    return await asyncio.to_thread(summarize_rollout, gateway.pool, progress.results, time.monotonic() - started, request,
                                   gateway.run_dir, state.difficulty)


def preflight(config: Any, request: RolloutRequest, spec: "ScaffoldSpec", registry: Any) -> None:
    """What would fail every trajectory alike fails the rollout now, before anything is recorded:
    a loop that does not resolve or options it refuses, an agent not installed, reward weights
    naming no component, a Ray cluster that could not reach a loopback gateway."""
    from forge_cli.gateway.server import LOOPBACK

    # every scaffold's section (a black-box agent asked for mcp it cannot take, too)
    validate_options(spec.options, config.scaffolds.get(spec.name, {}), f"[scaffolds.{spec.name}]")
    if spec.kind == "white":
        resolve_loop(spec)
    else:
        find_install(spec)
    check_sandbox(registry, sandbox_of(config, spec.name))
    active_components(registry.rewards, config.rewards)
    if (request.executor == "ray" and request.ray_address and not request.gateway_url
            and config.gateway.host in LOOPBACK):
        raise ForgeError(f"a Ray cluster at {request.ray_address} cannot reach a gateway on {config.gateway.host}: "
                         "serve it on an address the workers reach (gateway.host, with gateway.auth = strict)")


def sandbox_of(config: Any, scaffold: str) -> str:
    """The sandbox ``scaffold`` runs in: its own ``[scaffolds.NAME] sandbox`` (a black-box agent's), else
    ``rollout.sandbox``."""
    return config.scaffolds.get(scaffold, {}).get("sandbox") or config.rollout.sandbox


def check_sandbox(registry: Any, name: str) -> None:
    """A ForgeError unless the sandbox ``name`` is registered, can run agents, and works on this machine."""
    entry = registry.sandboxes.get(name)
    usable = sorted(n for n, e in registry.sandboxes.items() if e.value.open is not None)
    if entry is None or entry.value.open is None:
        raise ForgeError(f"unknown sandbox {name!r}: choose one of {', '.join(usable)} (forge doctor says which work here)")
    why = entry.value.check()
    if why is not None:
        raise ForgeError(f"the {name} sandbox does not work here: {why}")

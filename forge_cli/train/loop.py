"""The Forge loop (DESIGN.md §10): rollouts keep generating while the trainer trains.

    gateway + rollout driver (an endless task stream, under the scheduler's admission bound)
    [warm start: supervised steps on synthetic traces until held-out success reaches its target]
    each step: take P groups (the window decides) → samples (recorded ids, logprobs, advantages)
               → prefix-tree train step (in a thread) → weights into the engine (pause, swap,
               resume) → publish the version (frees admission slots) → metrics → eval → checkpoint

Everything is a library call; ``forge train`` only parses flags and draws what :func:`train_loop`
reports. A resumed run (``resume=True``) restores the latest checkpoint's weights, optimizer and
RNG states, gives the groups consumed after it back to the queue and drops the groups a killed
driver left without rewards, so nothing recorded is lost or trained on twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator

from forge_cli.engine.default_model import starting_policy
from forge_cli.errors import ForgeError
from forge_cli.pool.scheduler import Scheduler
from forge_cli.records.metrics import StepMetrics, read_state
from forge_cli.rollout.driver import rollout
from forge_cli.rollout.records import request_from_config
from forge_cli.train.batch import build_samples
from forge_cli.train.compose import OnEvent, Training, build_training
from forge_cli.train.evaluate import evaluate_heldout
from forge_cli.train.metrics import step_metrics, write_state
from forge_cli.train.resume import restore, save_step
from forge_cli.train.warmstart import keep_warm_model, run_warmstart, warm_record


@dataclass(frozen=True)
class TrainResult:
    run_dir: Any
    steps: int  # the run's last step
    policy_version: int
    status: str  # finished | stopped
    best_heldout_success: float | None
    first_heldout_success: float | None = None  # the policy the run started RL from (step 0)
    last_heldout_success: float | None = None  # the final policy's


async def train_loop(config: Any, *, run: str | None = None, steps: int | None = None, minutes: float | None = None,
                     resume: bool = False, warmstart: bool = False, save_warm_to: Any = None,
                     on_event: OnEvent | None = None) -> TrainResult:
    """Train on ``[rollout]``'s scaffold and tasks until ``steps`` steps (the run's total) or
    ``minutes`` of wall time, whichever comes first; Ctrl-C (cancellation) checkpoints and stops.
    ``warmstart``: first the supervised warm start (:mod:`.warmstart`), its weights kept at
    ``save_warm_to`` if given."""
    check_budget(steps, minutes)
    deadline = time.monotonic() + minutes * 60 if minutes else None
    async with build_training(config, run, resume=resume, on_event=on_event) as t:
        at = LoopState(*await restore(t.run, t.trainer, t.model, resume))
        at.first = read_state(t.run.dir).get("first_heldout_success") if resume else None
        async with recorded(t, at, minutes):
            if warmstart and not resume:
                await warm_up(t, at, deadline, save_warm_to)
            elif not resume and config.train.eval_every:  # the starting policy, measured: "before"
                t.tell("status", {"status": "held-out evaluation of the starting policy", "step": 0})
                await evaluate_now(t, at, None, None)
            scheduler, meter = Scheduler.from_config(config.pool, config.train.groups_per_step), StepMeter(t.run)
            async with producing(t, meter) as producer:
                stop_at = deadline  # the final evaluation counts in --minutes: each one moves it earlier
                while (steps is None or at.step < steps) and (stop_at is None or time.monotonic() < stop_at):
                    batch, samples, waited = await meter.take(scheduler, at.version, producer, stop_at)
                    if batch is None:
                        break  # out of time while waiting for data
                    stats, stop = await train_and_publish(t, at, samples, meter)  # train, swap, publish: one unit Ctrl-C waits for
                    t.tell("step", t.log.write(meter.measure(step_metrics(batch, samples, stats, step=at.step,
                                                                          difficulty=meter.difficulty), at, waited)))
                    if stop is not None:
                        raise stop
                    if config.train.eval_every and at.step % config.train.eval_every == 0:
                        stop_at = await evaluate_now(t, at, deadline, meter)
                    if config.train.checkpoint_every and at.step % config.train.checkpoint_every == 0:
                        await checkpoint(t, at)
                    write_state(t.run.dir, step=at.step, policy_version=at.version, best_heldout_success=at.best)
            if config.train.eval_every and at.step and at.step % config.train.eval_every:  # the final policy, measured
                t.tell("status", {"status": "final held-out evaluation", "step": at.step})
                await evaluate_now(t, at, None, meter)
            await checkpoint(t, at)
        return TrainResult(t.run.dir, at.step, at.version, at.status, at.best, at.first, at.last)


@dataclass
class LoopState:
    """Where the loop is: the last step, the version the engine serves, the best held-out success,
    the last step checkpointed, and how the run ended."""

    step: int
    version: int
    best: float | None
    saved: int = -1
    status: str = "running"
    first: float | None = None  # held-out success at step 0 (the warm start's last, or measured)
    last: float | None = None  # ... at the last evaluation

    def __post_init__(self) -> None:
        if self.saved < 0:
            self.saved = self.step


def check_budget(steps: int | None, minutes: float | None) -> None:
    if steps is not None and steps < 1:
        raise ForgeError(f"steps must be at least 1, got {steps}")
    if minutes is not None and not minutes > 0:
        raise ForgeError(f"minutes must be > 0, got {minutes}")


@contextlib.asynccontextmanager
async def recorded(t: Training, at: LoopState, minutes: float | None) -> AsyncIterator[None]:
    """The run's state file through the loop: running, then finished, stopped (Ctrl-C: the last step
    kept) or failed (with the error)."""
    first = {} if read_state(t.run.dir).get("started_at") else {"started_at": time.time()}  # a resumed run keeps its own
    write_state(t.run.dir, status="running", step=at.step, policy_version=at.version, minutes=minutes, error=None,
                best_heldout_success=at.best, **first)
    try:
        yield
    except BaseException as exc:
        stopped = isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt))
        if stopped and at.step and at.saved != at.step:
            await asyncio.shield(save_step(t.config, t.run.dir, t.model, t.trainer, at.step, at.version))  # Ctrl-C: keep the last step
        write_state(t.run.dir, status="stopped" if stopped else "failed", step=at.step, policy_version=at.version,
                    best_heldout_success=at.best, error=None if stopped else str(exc)[:500])
        raise
    at.status = "finished"
    write_state(t.run.dir, status=at.status, step=at.step, policy_version=at.version, best_heldout_success=at.best)
    t.tell("status", {"status": at.status, "step": at.step})


async def warm_up(t: Training, at: LoopState, deadline: float | None, save_warm_to: Any) -> None:
    """The supervised warm start; its weights kept at ``save_warm_to`` once it reached its target (else
    the next run warm-starts anew), and checkpointed as step 0 (a kill now resumes warm)."""
    warm = await run_warmstart(t.config, t.run, t.gateway, t.trainer, log=t.log, on_event=t.tell, deadline=deadline)
    at.version, at.best = t.run.version, warm.heldout_success
    at.first = at.last = warm.heldout_success
    write_state(t.run.dir, first_heldout_success=at.first)
    if save_warm_to is not None and warm.reason == "target reached":
        await asyncio.to_thread(keep_warm_model, t.model, t.config.model.path, save_warm_to, warm_record(t.config, warm),
                                t.trainer.state_dict)
    await _unstoppable(save_step(t.config, t.run.dir, t.model, t.trainer, 0, at.version))


class StepMeter:
    """The step's timings and rates: when its take began and its samples were ready, when training
    ended; the rollout's live output tokens and each task's difficulty, as the producer reports them."""

    def __init__(self, run: Any) -> None:
        self.run, self.live, self.difficulty = run, {"output_tokens": 0.0}, {}
        self.t0 = self.t1 = self.t2 = 0.0  # this step's take began, its samples were ready, its training ended
        self.reset()

    def reset(self) -> None:
        """Rates start again from now (after an evaluation, which is not the loop's time)."""
        self.last, self.sampled, self.engine_busy = time.monotonic(), self.live["output_tokens"], self.run.engine.busy_seconds()

    async def take(self, scheduler: Any, version: int, producer: asyncio.Task, deadline: float | None) -> tuple[Any, Any, float]:
        """The next batch of P groups, its samples, and how long the trainer waited for it (idle),
        waiting for the rollouts as long as it takes — or until the deadline (then no batch)."""
        self.t0 = time.monotonic()
        while True:
            t = time.monotonic()
            batch = await asyncio.to_thread(scheduler.take, self.run.pool, version)
            if batch.groups:
                samples = build_samples(batch)
                self.t1 = time.monotonic()
                return batch, samples, t - self.t0
            if producer.done():  # it ended (or failed) before the steps were done
                producer.result()
                raise ForgeError("the rollout stopped producing before the last train step")
            if deadline is not None and time.monotonic() >= deadline:
                return None, None, time.monotonic() - self.t0
            await asyncio.sleep(0.05)

    def measure(self, metrics: StepMetrics, at: LoopState, waited: float) -> StepMetrics:
        """``metrics`` with the step's version, timings and rates."""
        now, busy = time.monotonic(), self.run.engine.busy_seconds()
        span = max(now - self.last, 1e-9)
        metrics = replace(metrics, policy_version=at.version, take_s=self.t1 - self.t0, wait_s=waited,
                          trainer_idle=waited / span, engine_idle=max(0.0, 1.0 - (busy - self.engine_busy) / span),
                          train_s=self.t2 - self.t1, sync_s=now - self.t2, step_s=now - self.last,
                          samples_per_s=metrics.trajectories / span,
                          train_tokens_per_s=self.run.config.train.updates_per_step * metrics.unique_tokens / max(self.t2 - self.t1, 1e-9),
                          rollout_tokens_per_s=(self.live["output_tokens"] - self.sampled) / span)
        self.last, self.sampled, self.engine_busy = now, self.live["output_tokens"], busy
        return metrics

    def report(self, progress: Any, tell: OnEvent) -> None:
        """The producer's live counts: kept for the step's rates and shown."""
        self.live["output_tokens"] = progress.output_tokens
        if len(self.difficulty) < len(progress.difficulty):
            for task_id, value in progress.difficulty.items():
                try:
                    self.difficulty.setdefault(task_id, float(value))
                except (TypeError, ValueError):  # a suite whose difficulty is not a number
                    pass
        tell("rollout", {"running": progress.running, "finished": progress.finished, "solved": progress.solved,
                         "infra": progress.infra, "retried": progress.retried, "dropped_groups": progress.dropped_groups,
                         "output_tokens": progress.output_tokens, "elapsed_s": time.monotonic() - progress.started_at})


@contextlib.asynccontextmanager
async def producing(t: Training, meter: StepMeter) -> AsyncIterator[asyncio.Task]:
    """The rollouts, an endless task stream beside the steps, under the scheduler's admission bound."""
    request = request_from_config(t.config, groups=None, first_group=_next_group(t.run.pool), split="train")
    producer = asyncio.create_task(rollout(t.config, request, gateway=t.gateway, consumer=True,
                                           on_progress=lambda p: meter.report(p, t.tell)))
    try:
        yield producer
    finally:
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)


async def train_and_publish(t: Training, at: LoopState, samples: Any, meter: StepMeter) -> tuple[Any, BaseException | None]:
    """Train, swap, publish as one unit a Ctrl-C waits for (a thread cannot be stopped), so a checkpoint
    never holds half a step or a step under the wrong number: (its stats, the cancellation to raise
    once the step is recorded, if one came)."""
    work, stop = asyncio.ensure_future(_advance(t.config, t.trainer, t.run, samples)), None
    try:
        stats, meter.t2, at.version = await asyncio.shield(work)
    except asyncio.CancelledError as cancelled:  # let the step end, record it, then stop
        stats, meter.t2, at.version = await work
        stop = cancelled
    at.step += 1
    return stats, stop


async def evaluate_now(t: Training, at: LoopState, deadline: float | None, meter: StepMeter | None) -> float | None:
    """A held-out evaluation of the weights the engine serves, logged; the loop's new stop: ``deadline``
    less the evaluation's time (the final one must fit in the budget too)."""
    started = time.monotonic()
    result = await evaluate_heldout(t.config, t.run, t.gateway, tasks=t.config.train.eval_tasks,
                            samples_per_task=t.config.train.eval_samples)
    t.tell("eval", t.log.write(result.metrics(at.step)))
    at.best, at.last = max(at.best or 0.0, result.success), result.success
    if at.first is None and at.step == 0:
        at.first = result.success
        write_state(t.run.dir, first_heldout_success=at.first, starting_policy=starting_policy(t.config.model.path))
    if meter is not None:
        meter.reset()
    return deadline - (time.monotonic() - started) if deadline is not None else None


async def checkpoint(t: Training, at: LoopState) -> None:
    """Save the step (unless it is saved already), to its end even if cancelled meanwhile."""
    if at.step and at.saved != at.step:
        await _unstoppable(save_step(t.config, t.run.dir, t.model, t.trainer, at.step, at.version))
        at.saved = at.step


async def _advance(config: Any, trainer: Any, run: Any, samples: Any) -> tuple[Any, float, int]:
    """One train step on ``samples`` (``train.updates_per_step`` optimizer updates), its weights into
    the engine and the version published: (the last update's stats, when training ended, the new version)."""
    for _ in range(config.train.updates_per_step):  # the sampler's logprobs stay the ratios' denominator
        stats = await asyncio.to_thread(
            trainer.step, samples.samples, config.train.loss, temperature=samples.temperature or 1.0,
            attention=config.train.attention, split=config.train.split, budget=config.train.micro_batch_tokens)
    trained = time.monotonic()
    weights = await asyncio.to_thread(trainer.state_dict)  # a gather under ZeRO-3: off the event loop
    version = await run.engine.load_weights(weights)  # pause, swap, resume: no request lost
    await asyncio.to_thread(run.pool.publish_version, version)
    return stats, trained, version


async def _unstoppable(work: Any) -> Any:
    """Await ``work`` to its end even if cancelled meanwhile; then let the cancellation through."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


def _next_group(pool: Any) -> int:
    """The task stream's next index: how many training groups the pool's queue has had."""
    return int(pool.stats()["queue"]["next_index"])

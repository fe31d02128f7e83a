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
from typing import Any, Callable

from forge_cli.errors import ForgeError
from forge_cli.records.metrics import MetricsRecord

# (kind, what): "step", "eval", "warmstart": the line's record (forge_cli.records.metrics); "rollout", "status": a dict
Event = Callable[[str, Any], None]


@dataclass(frozen=True)
class TrainResult:
    run_dir: Any
    steps: int  # the run's last step
    policy_version: int
    status: str  # finished | stopped
    best_heldout_success: float | None


async def train_loop(config: Any, *, run: str | None = None, steps: int | None = None, minutes: float | None = None,
                     resume: bool = False, warm_start: bool = False, save_warm_to: Any = None,
                     on_event: Event | None = None) -> TrainResult:
    """Train on ``[rollout]``'s scaffold and tasks until ``steps`` steps (the run's total) or
    ``minutes`` of wall time, whichever comes first; Ctrl-C (cancellation) checkpoints and stops.
    ``warm_start``: first the supervised warm start (:mod:`.warmstart`), its weights kept at
    ``save_warm_to`` if given."""
    from forge_cli.gateway.server import serve_gateway
    from forge_cli.pool.scheduler import Scheduler
    from forge_cli.rollout.driver import request_from_config, rollout
    from forge_cli.train.batch import build_samples
    from forge_cli.train.distributed import make_loop_trainer
    from forge_cli.train.metrics import MetricsLog, run_log, step_metrics, write_state
    from forge_cli.train.resume import restore, save, trainer_model

    if steps is not None and steps < 1:
        raise ForgeError(f"steps must be at least 1, got {steps}")
    if minutes is not None and not minutes > 0:
        raise ForgeError(f"minutes must be > 0, got {minutes}")
    shown = on_event or (lambda kind, fields: None)
    deadline = time.monotonic() + minutes * 60 if minutes else None
    P = config.train.groups_per_step
    async with serve_gateway(config, run) as gw, contextlib.AsyncExitStack() as stack:
        logger = stack.enter_context(run_log(gw.run_dir))

        def tell(kind: str, fields: Any) -> None:
            if kind != "rollout":
                said = fields.line() if isinstance(fields, MetricsRecord) else fields
                logger.info("%s %s", kind, {k: v for k, v in said.items() if k != "group_ids"})
            shown(kind, fields)

        model = trainer_model(config, gw.run_dir, resume)
        trainer = make_loop_trainer(config, model)
        log = MetricsLog(gw.run_dir)
        step, version, best = await restore(gw, trainer, model, resume)
        saved = step
        write_state(gw.run_dir, status="running", step=step, policy_version=version, minutes=minutes, error=None,
                    started_at=time.time(), best_heldout_success=best)
        try:
            if warm_start and not resume:
                from forge_cli.train.warmstart import warm_start as run_warm_start

                warm = await run_warm_start(config, gw, trainer, log=log, on_event=tell, deadline=deadline)
                version, best = gw.engine.version, warm.heldout_success
                if save_warm_to is not None and warm.reason == "target reached":  # else the next run warm-starts anew
                    from forge_cli.train.run import keep_warm_model, warm_record

                    await asyncio.to_thread(keep_warm_model, model, config.model.path, save_warm_to, warm_record(config, warm),
                                            trainer.state_dict)
                await _unstoppable(save(config, gw.run_dir, model, trainer, 0, version))  # a kill now resumes warm
            scheduler = Scheduler.from_config(config.pool, P)
            difficulty: dict[str, float] = {}
            request = request_from_config(config, groups=None, first_group=_next_group(gw.pool), split="train")
            live: dict[str, float] = {}
            producer = asyncio.create_task(rollout(config, request, gateway=gw, consumer=True,
                                                   on_progress=lambda p: _progress(p, live, difficulty, tell)))
            try:
                last, sampled, engine_busy = time.monotonic(), 0.0, gw.engine.busy_seconds()
                # the final evaluation counts in --minutes: steps stop one evaluation's time early
                stop_at = deadline
                while (steps is None or step < steps) and (stop_at is None or time.monotonic() < stop_at):
                    t0 = time.monotonic()
                    batch, waited = await _take(scheduler, gw, version, producer, stop_at)
                    if batch is None:
                        break  # out of time while waiting for data
                    samples = build_samples(batch)
                    t1 = time.monotonic()
                    # train, swap, publish: one unit a Ctrl-C waits for (a thread cannot be stopped), so a
                    # checkpoint never holds half a step or a step under the wrong number
                    work, stop = asyncio.ensure_future(_advance(config, trainer, gw, samples)), None
                    try:
                        stats, t2, version = await asyncio.shield(work)
                    except asyncio.CancelledError as cancelled:  # let the step end, record it, then stop
                        stats, t2, version = await work
                        stop = cancelled
                    step, now = step + 1, time.monotonic()
                    metrics = step_metrics(batch, samples, stats, step=step, difficulty=difficulty)
                    busy = gw.engine.busy_seconds()
                    metrics = replace(metrics, policy_version=version, take_s=t1 - t0, wait_s=waited,
                                      trainer_idle=waited / max(now - last, 1e-9),
                                      engine_idle=max(0.0, 1.0 - (busy - engine_busy) / max(now - last, 1e-9)),
                                      train_s=t2 - t1, sync_s=now - t2, step_s=now - last,
                                      samples_per_s=metrics.trajectories / max(now - last, 1e-9),
                                      train_tokens_per_s=config.train.updates_per_step * metrics.unique_tokens / max(t2 - t1, 1e-9),
                                      rollout_tokens_per_s=(live.get("output_tokens", 0.0) - sampled) / max(now - last, 1e-9))
                    last, sampled, engine_busy = now, live.get("output_tokens", 0.0), busy
                    tell("step", log.write(metrics))
                    if stop is not None:
                        raise stop
                    if config.train.eval_every and step % config.train.eval_every == 0:
                        best = await _evaluate(config, gw, log, tell, step, best)
                        stop_at = deadline - (time.monotonic() - now) if deadline is not None else None
                        last, sampled, engine_busy = time.monotonic(), live.get("output_tokens", 0.0), gw.engine.busy_seconds()
                    if config.train.checkpoint_every and step % config.train.checkpoint_every == 0:
                        await _unstoppable(save(config, gw.run_dir, model, trainer, step, version))
                        saved = step
                    write_state(gw.run_dir, step=step, policy_version=version, best_heldout_success=best)
            finally:
                producer.cancel()
                await asyncio.gather(producer, return_exceptions=True)
            if config.train.eval_every and step and step % config.train.eval_every:  # the final policy, measured
                tell("status", {"status": "final held-out evaluation", "step": step})
                best = await _evaluate(config, gw, log, tell, step, best)
            if step and saved != step:
                await _unstoppable(save(config, gw.run_dir, model, trainer, step, version))
                saved = step
            status = "finished"
        except BaseException as exc:
            stopped = isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt))
            if stopped and step and saved != step:
                await asyncio.shield(save(config, gw.run_dir, model, trainer, step, version))  # Ctrl-C: keep the last step
            write_state(gw.run_dir, status="stopped" if stopped else "failed", step=step, policy_version=version,
                        best_heldout_success=best, error=None if stopped else str(exc)[:500])
            raise
        finally:
            log.close()
            trainer.close()
        write_state(gw.run_dir, status=status, step=step, policy_version=version, best_heldout_success=best)
        tell("status", {"status": status, "step": step})
        return TrainResult(gw.run_dir, step, version, status, best)


async def _advance(config: Any, trainer: Any, gw: Any, samples: Any) -> tuple[Any, float, int]:
    """One train step on ``samples`` (``train.updates_per_step`` optimizer updates), its weights into
    the engine and the version published: (the last update's stats, when training ended, the new version)."""
    for _ in range(config.train.updates_per_step):  # the sampler's logprobs stay the ratios' denominator
        stats = await asyncio.to_thread(
            trainer.step, samples.samples, config.train.loss, temperature=samples.temperature or 1.0,
            attention=config.train.attention, split=config.train.split, budget=config.train.micro_batch_tokens)
    trained = time.monotonic()
    weights = await asyncio.to_thread(trainer.state_dict)  # a gather under ZeRO-3: off the event loop
    version = await gw.engine.load_weights(weights)  # pause, swap, resume: no request lost
    await asyncio.to_thread(gw.pool.publish_version, version)
    return stats, trained, version


async def _unstoppable(work: Any) -> Any:
    """Await ``work`` to its end even if cancelled meanwhile; then let the cancellation through."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


async def _evaluate(config: Any, gw: Any, log: Any, tell: Event, step: int, best: float | None) -> float:
    """A held-out evaluation of the weights the engine serves, logged; returns the best rate so far."""
    from forge_cli.train.evaluate import evaluate

    result = await evaluate(config, gw, tasks=config.train.eval_tasks, samples_per_task=config.train.eval_samples)
    tell("eval", log.write(result.metrics(step)))
    return max(best or 0.0, result.success)


async def _take(scheduler: Any, gw: Any, version: int, producer: asyncio.Task,
                deadline: float | None) -> tuple[Any, float]:
    """The next batch of P groups and how long the trainer waited for it (idle), waiting for the
    rollouts as long as it takes — or until the deadline (then no batch)."""
    started = time.monotonic()
    while True:
        t = time.monotonic()
        batch = await asyncio.to_thread(scheduler.take, gw.pool, version)
        if batch.groups:
            return batch, t - started
        if producer.done():  # it ended (or failed) before the steps were done
            producer.result()
            raise ForgeError("the rollout stopped producing before the last train step")
        if deadline is not None and time.monotonic() >= deadline:
            return None, time.monotonic() - started
        await asyncio.sleep(0.05)


def _progress(progress: Any, live: dict[str, float], difficulty: dict[str, float], tell: Event) -> None:
    """The producer's live counts: kept for the step's rates and shown."""
    live["output_tokens"] = progress.output_tokens
    if len(difficulty) < len(progress.difficulty):
        for task_id, value in progress.difficulty.items():
            try:
                difficulty.setdefault(task_id, float(value))
            except (TypeError, ValueError):  # a suite whose difficulty is not a number
                pass
    tell("rollout", {"running": progress.running, "finished": progress.finished, "solved": progress.solved,
                     "output_tokens": progress.output_tokens, "elapsed_s": time.monotonic() - progress.started_at})



def _next_group(pool: Any) -> int:
    """The task stream's next index: how many training groups the pool's queue has had."""
    return int(pool.stats()["queue"]["next_index"])

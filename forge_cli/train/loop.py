"""The Forge loop (DESIGN.md §10): rollouts keep generating while the trainer trains.

    gateway + rollout driver (producing groups under the pool's admission bound)
    each step: take P groups (windowed FIFO) → samples (recorded ids, logprobs, advantages)
               → prefix-tree train step (off the event loop) → weights into the engine (pause,
               swap, resume) → publish the version (frees admission slots) → metrics → checkpoint

Everything is a library call; ``forge train`` (to come) only parses flags.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from forge_cli.errors import ForgeError


@dataclass(frozen=True)
class StepReport:
    """What one train step did (a line of ``RUN/metrics.jsonl``)."""

    step: int
    policy_version: int  # the engine's version once this step's weights are in
    groups: int
    samples: int
    loss: float
    mean_ratio: float
    reward_mean: float
    success: float  # share of the step's trajectories whose outcome is 1
    max_age: int  # trainer version − the version that sampled it
    mean_age: float
    packed_tokens: int
    take_s: float
    train_s: float
    sync_s: float


async def train_loop(config: Any, *, run: str | None = None, steps: int, checkpoint_every: int = 0,
                     on_step: Callable[[StepReport], None] | None = None) -> list[StepReport]:
    """Train for ``steps`` steps on ``[rollout]``'s scaffold and tasks; return each step's report."""
    from forge_cli.engine.default_model import resolve_model_path
    from forge_cli.engine.hf import load_hf
    from forge_cli.gateway.server import serve_gateway
    from forge_cli.pool.scheduler import Scheduler
    from forge_cli.rollout.driver import RolloutRequest, rollout
    from forge_cli.train.batch import build_samples
    from forge_cli.train.checkpoint import TrainerState, save_checkpoint
    from forge_cli.train.engines import make_train_engine

    if steps < 1:
        raise ForgeError(f"steps must be at least 1, got {steps}")
    P, r = config.train.groups_per_step, config.rollout
    request = RolloutRequest(scaffold=r.scaffold, suite=r.task, verifier=r.verifier, split=r.split,
                             groups=steps * P + config.pool.max_active_groups, n=config.train.group_size,
                             concurrency=r.concurrency, trajectory_timeout_s=r.trajectory_timeout_s,
                             max_tokens_per_trajectory=r.max_tokens_per_trajectory, seed=config.run.seed, executor=r.executor,
                             ray_address=r.ray_address)
    model, _ = load_hf(resolve_model_path(config.model.path))  # the trainer's own copy of the weights
    model.train()
    reports: list[StepReport] = []
    async with serve_gateway(config, run) as gw:
        trainer = make_train_engine(config.train.engine, model, config.train.lr, precision=config.train.precision)
        scheduler = Scheduler.from_config(config.pool, P)
        producer = asyncio.create_task(rollout(config, request, gateway=gw, consumer=True))
        metrics = (gw.run_dir / "metrics.jsonl").open("a")
        try:
            version = gw.engine.version
            while len(reports) < steps:
                t0 = time.monotonic()
                batch = await asyncio.to_thread(scheduler.take, gw.pool, version)
                if not batch.groups:
                    if producer.done():  # it ended (or failed) before the steps were done
                        producer.result()
                        raise ForgeError("the rollout ran out of tasks before the last train step")
                    await asyncio.sleep(0.1)
                    continue
                samples = build_samples(batch)
                t1 = time.monotonic()
                stats = await asyncio.to_thread(
                    trainer.step, samples.samples, config.train.loss, temperature=samples.temperature or 1.0,
                    attention=config.train.attention, split=config.train.split, budget=config.train.micro_batch_tokens)
                t2 = time.monotonic()
                version = await gw.engine.load_weights(trainer.state_dict())  # pause, swap, resume: no request lost
                await asyncio.to_thread(gw.pool.publish_version, version)
                trajectories = [t for g in batch.groups for t in g.trajectories]
                report = StepReport(
                    step=len(reports) + 1, policy_version=version, groups=len(batch.groups), samples=len(samples.samples),
                    loss=float(stats.loss), mean_ratio=float(stats.mean_ratio),
                    reward_mean=sum(t.reward or 0.0 for t in trajectories) / max(len(trajectories), 1),
                    success=sum(1 for t in trajectories if t.rewards.get("outcome", 0.0) >= 1.0) / max(len(trajectories), 1),
                    max_age=samples.max_age, mean_age=samples.mean_age, packed_tokens=int(stats.packed_tokens),
                    take_s=t1 - t0, train_s=t2 - t1, sync_s=time.monotonic() - t2)
                reports.append(report)
                metrics.write(json.dumps(asdict(report)) + "\n")
                metrics.flush()
                if checkpoint_every and report.step % checkpoint_every == 0:
                    await asyncio.to_thread(save_checkpoint, gw.run_dir / "checkpoints", model, trainer.optimizer, None,
                                            TrainerState(step=report.step, policy_version=version))
                if on_step is not None:
                    on_step(report)
        finally:
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)
            metrics.close()
            trainer.close()
    return reports

"""The warm start: supervised fine-tuning on synthetic traces, so that RL starts from a policy that
makes well-formed tool calls and solves some — not most — held-out tasks.

The traces are written by the project itself: the scripted demo policies
(:mod:`forge_cli.tasks.demo_policies`) solve train-split tasks through a real gateway, the real
scaffold and the real tools, so each trace's tokens are exactly what the policy will see and emit
in RL (one place where text becomes tokens). The policy learns their completions with
cross-entropy (``[train.loss] type = "cross_entropy"``) through the same prefix-tree train step,
and stops on a *measured* rate — sampled held-out success, every ``eval_every`` steps — not on a
step count: a tiny model learns to copy suddenly (../shared/recipes/learning-on-cpu.md), so a
fixed number of steps gives anything from 0 to 90 %.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

from forge_cli.configs.model import ScriptedEngineConfig
from forge_cli.configs.train import CrossEntropyLossConfig
from forge_cli.engine.default_model import MARKER
from forge_cli.errors import ForgeError
from forge_cli.pool.types import Sample, TrajectoryStatus
from forge_cli.records.metrics import WarmstartMetrics
from forge_cli.rollout.driver import rollout
from forge_cli.rollout.records import request_from_config
from forge_cli.tasks.demo_policies import MAX_RECHECKS, SLIPPING_SUITES, policy_for
from forge_cli.train.distributed import on_every_rank
from forge_cli.train.evaluate import evaluate_heldout
from forge_cli.train.metrics import suite_of
from forge_cli.train.resume import COPIED_FILES, optimizer_of


FIRST_LOSSES = 8  # the steps whose losses a warm start's record keeps


@dataclass(frozen=True)
class WarmstartResult:
    steps: int
    seconds: float
    heldout_success: float | None  # at the last evaluation
    reason: str  # "target reached" | "time budget" | "step budget"
    traces: int  # the traces written (and kept: what the teacher solved or, slipping, finished)
    first_losses: tuple[float, ...] = ()  # the first steps' losses: what tells one recipe's run from another's


class TraceWriter:
    """Writes synthetic traces batch after batch through a scripted gateway of its own (its run
    folder: ``run_dir``), continuing the train-split task stream where the last batch stopped: the
    demo policy (:func:`~forge_cli.tasks.demo_policies.policy_for`) solves the tasks through the real
    scaffold and tools, so each trace's tokens are exactly what the policy sees and emits in RL."""

    def __init__(self, config: Any, run_dir: Path, slips: float = 0.0, rechecks: float = 0.0,
                 warmups: float = 0.0, max_warmups: int = MAX_RECHECKS) -> None:
        self.slips, self.next_group, self.written = slips, 0, 0
        self.policy = policy_for(request_from_config(config, groups=1).weights, slips=slips, seed=config.run.seed,
                                 rechecks=rechecks, warmups=warmups, max_warmups=max_warmups)
        self.config = config.model_copy(deep=True)
        self.config.model.engine = ScriptedEngineConfig(policy=self.policy)
        self.config.model.replicas = 1
        self.config.gateway.port, self.config.gateway.socket = 0, ""
        self.config.run.dir = Path(run_dir).parent
        self.config.pool.url = "sqlite"
        self.run_name = Path(run_dir).name
        self._last_index: int | None = None  # the queue_index of the last group read
        self._run: Any = None
        self._gateway: Any = None
        self._stack: Any = None

    async def __aenter__(self) -> "TraceWriter":
        from forge_cli.gateway.server import open_and_serve

        self._stack = contextlib.AsyncExitStack()
        self._run, self._gateway = await self._stack.enter_async_context(open_and_serve(self.config, self.run_name))
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop its gateway (again: nothing)."""
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()

    async def write(self, traces: int) -> list[Any]:
        """Cross-entropy samples of the completions of the next ``traces`` train-split trajectories:
        the solved ones, or with ``slips`` (the teacher's miscopies, ``[train.warmstart]
        teacher_slips``) every finished one — an imperfect teacher's data is not sorted by the
        verifier, which would already be using the reward."""
        request = request_from_config(self.config, groups=traces, n=1, split="train", first_group=self.next_group)
        self.next_group += traces
        await rollout(self.config, request, gateway=self._gateway)
        samples: list[Sample] = []
        # the groups of this batch alone, in queue order, which is the task stream's: one seed, one order
        written = await asyncio.to_thread(self._run.pool.groups, after_index=self._last_index)
        self._last_index = max((g.queue_index for g in written), default=self._last_index)
        for group in written:
            for t in group.trajectories:
                slipping = self.slips and suite_of(t.task_id) in SLIPPING_SUITES
                # what a slipping teacher finished; else only what solved its task
                kept = t.status is TrajectoryStatus.COMPLETED if slipping else t.rewards.get("outcome", 0.0) >= 1.0
                if not kept:
                    continue
                self.written += 1
                samples += [Sample(tokens=list(c.prompt_ids) + list(c.output_ids), prompt_len=len(c.prompt_ids),
                                   old_logprobs=[0.0] * len(c.output_ids), advantages=[1.0] * len(c.output_ids),
                                   completion_id=c.id, policy_version=0) for c in t.completions if c.output_ids]
        return samples

    async def first(self, traces: int) -> list[Any]:
        """:meth:`write`, and a ForgeError if the demo policy solved none of them."""
        samples = await self.write(traces)
        if not samples:
            did = "finished" if self.slips else "solved"
            raise ForgeError(f"the demo policy ({self.policy}) {did} none of {traces} train tasks: nothing to warm-start on")
        return samples


async def synthetic_samples(config: Any, run_dir: Path, traces: int, slips: float = 0.0, rechecks: float = 0.0,
                            warmups: float = 0.0, max_warmups: int = MAX_RECHECKS) -> list[Any]:
    """The samples of ``traces`` synthetic trajectories (:meth:`TraceWriter.first`)."""
    async with TraceWriter(config, run_dir, slips, rechecks, warmups, max_warmups) as writer:
        return await writer.first(traces)


class FreshFirst:
    """The warm start's data: a list that may grow while a :class:`TraceWriter` keeps writing; a
    batch takes the completions no step has learned yet first (oldest of them first), then fills up
    with random ones already learned — one pass over the traces before any is seen again."""

    def __init__(self, samples: list[Any], rng: random.Random) -> None:
        self.samples, self.rng, self.learned = list(samples), rng, 0

    def add(self, samples: list[Any]) -> None:
        self.samples += samples

    def batch(self, size: int) -> list[Any]:
        size = min(size, len(self.samples))
        fresh = self.samples[self.learned:self.learned + size]
        self.learned += len(fresh)
        return fresh + self.rng.sample(self.samples[:self.learned - len(fresh)], size - len(fresh))


async def run_warmstart(config: Any, run: Any, gateway: Any, trainer: Any, *, log: Any = None,
                     on_event: Callable[[str, Any], None] | None = None,
                     deadline: float | None = None) -> WarmstartResult:
    """Supervised steps on synthetic traces until sampled held-out success reaches
    ``[train.warmstart] target_success`` (or ``max_minutes``/``deadline``); the engine ends up
    serving the warm weights, and the optimizer's state is cleared for RL."""
    ws, tell = config.train.warmstart, on_event or (lambda kind, fields: None)
    started = time.monotonic()
    tell("status", {"status": "warm start: writing synthetic traces", "step": 0})
    async with TraceWriter(config, run.dir / "warmstart", ws.teacher_slips, ws.teacher_rechecks, ws.teacher_warmups,
                           ws.teacher_max_warmups) as writer:
        data = FreshFirst(await writer.first(ws.traces), random.Random(config.run.seed))
        more = asyncio.create_task(_keep_writing(writer, data, ws.fresh_traces)) if ws.fresh_traces else None
        if more is None:
            await writer.close()  # nothing more to write: its gateway need not run beside the steps
        try:
            step, success, reason, losses = await _learn(config, run, gateway, trainer, data, started, deadline, log, tell)
        finally:
            if more is not None:
                more.cancel()
                ended = (await asyncio.gather(more, return_exceptions=True))[0]
                if isinstance(ended, Exception):  # the steps went on with the traces already written
                    tell("status", {"status": f"warm start: the trace writer stopped early: {type(ended).__name__}: {ended}"})
    return WarmstartResult(steps=step, seconds=time.monotonic() - started, heldout_success=success, reason=reason,
                           traces=writer.written, first_losses=tuple(losses))


async def _keep_writing(writer: TraceWriter, data: FreshFirst, traces: int) -> None:
    """Write ``traces`` more traces at a time into ``data`` until cancelled (the warm start ended)."""
    while True:
        data.add(await writer.write(traces))


async def _learn(config: Any, run: Any, gateway: Any, trainer: Any, data: FreshFirst, started: float, deadline: float | None,
                 log: Any, tell: Callable[[str, Any], None]) -> tuple[int, float | None, str, list[float]]:
    """The supervised steps: (steps, the last held-out success, why they stopped, the first
    :data:`FIRST_LOSSES` steps' losses)."""
    ws = config.train.warmstart
    stop_at = started + ws.max_minutes * 60
    stop_at = min(stop_at, deadline) if deadline is not None else stop_at
    rl_lr = on_every_rank(trainer, set_lr, ws.lr)
    step, success, reason, losses = 0, None, "time budget", []
    tell("status", {"status": f"warm start: {len(data.samples)} completions", "step": 0})
    budget_s = stop_at - time.monotonic()
    try:
        while True:
            lr = (cosine_lr(ws.lr, ws.final_lr_fraction, step, ws.decay_steps) if ws.decay_steps else
                  cosine_lr(ws.lr, ws.final_lr_fraction, time.monotonic() - (stop_at - budget_s), budget_s))
            on_every_rank(trainer, set_lr, lr)
            batch = data.batch(ws.batch_size)
            stats = await asyncio.to_thread(trainer.step, batch, CrossEntropyLossConfig(), temperature=1.0,
                                            attention=config.train.attention, split=config.train.split,
                                            budget=config.train.micro_batch_tokens)
            step += 1
            if len(losses) < FIRST_LOSSES:
                losses.append(float(stats.loss))
            line = WarmstartMetrics(step=step, loss=float(stats.loss), lr=lr, tokens=int(stats.tokens),
                                    unique_tokens=int(stats.packed_tokens), completions=len(data.samples),
                                    learned=data.learned)
            out_of_steps = ws.max_steps is not None and step >= ws.max_steps
            out_of_time = time.monotonic() >= stop_at or out_of_steps
            if step % ws.eval_every == 0 or out_of_time:
                await run.engine.load_weights(trainer.state_dict())
                result = await evaluate_heldout(config, run, gateway, tasks=config.train.eval_tasks, samples_per_task=config.train.eval_samples)
                success = result.success
                line = replace(line, heldout_success=success, policy_version=result.policy_version,
                               solved_seconds=result.solved_seconds, solved_tool_calls=result.solved_tool_calls)
            if log is not None:
                line = log.write(line)
            tell("warmstart", line)
            if success is not None and success >= ws.target_success:
                reason = "target reached"
                break
            if out_of_time:
                reason = "step budget" if out_of_steps else reason
                break
    finally:
        on_every_rank(trainer, set_lr, rl_lr)
        on_every_rank(trainer, clear_moments)  # RL starts with fresh moments: the supervised ones point elsewhere
    return step, success, reason, losses


def cosine_lr(lr: float, final_fraction: float, elapsed_s: float, budget_s: float) -> float:
    """``lr`` falling along a half cosine to ``lr * final_fraction`` as ``elapsed_s`` goes from 0 to
    ``budget_s`` (and staying there after): seconds of a time budget, or steps of ``decay_steps``.
    Measured here: 3e-3 starts the copying transition soonest, but holding it after the transition
    undoes part of it, while 1e-3 keeps improving."""
    progress = min(1.0, max(0.0, elapsed_s / budget_s)) if budget_s > 0 else 1.0
    return lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * progress)))


def set_lr(engine: Any, lr: float) -> float:
    """Set the learning rate of ``engine``'s optimizer (on every rank through ``on_every_rank``);
    return the one it had."""
    groups = optimizer_of(engine).param_groups
    before = groups[0]["lr"]
    for group in groups:
        group["lr"] = lr
    return before


def clear_moments(engine: Any) -> None:
    """Forget the optimizer's moments (Adam's state), keeping its parameters."""
    optimizer = optimizer_of(engine)
    inner = getattr(optimizer, "optimizer", None)  # DeepSpeed's ZeRO wrapper keeps the torch optimizer inside
    for opt in (optimizer, inner):
        if opt is not None and hasattr(opt, "state"):
            opt.state.clear()


def keep_warm_model(model: Any, source: Path, target: Path, record: dict[str, Any],
                    state_dict: Callable[[], dict[str, Any]] | None = None) -> Path:
    """Save the warm-started weights as a servable model folder at ``target`` (replacing it
    atomically), with the tokenizer of ``source`` and ``warmstart.json``; ``state_dict``: the train
    engine's, which gathers partitioned (ZeRO-3) weights."""

    source, target = Path(source).expanduser(), Path(target)
    tmp = target.with_name(f".{target.name}.writing")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True, **({"state_dict": state_dict()} if state_dict else {}))
    for name in COPIED_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, tmp / name)
    (tmp / "warmstart.json").write_text(json.dumps({**record, "created_at": time.time()}, indent=2))
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return target


def warm_record(config: Any, result: Any) -> dict[str, Any]:
    """What ``warmstart.json`` says of a warm start."""

    return {"from": str(config.model.path), **warm_key(config), **asdict(result), "recipe": warm_recipe(config)}


def warm_recipe(config: Any) -> dict[str, Any]:
    """What else decides the warm weights besides :func:`warm_key`: the seed, the warm start's
    settings and the model it started from (``forge model init``'s marker), as ``--set`` values —
    what ``forge model warmstart`` needs to make them again."""
    marker = Path(str(config.model.path)).expanduser() / MARKER
    return {"run.seed": config.run.seed, "model.init": json.loads(marker.read_text()) if marker.is_file() else None,
            **{f"train.warmstart.{k}": v for k, v in config.train.warmstart.model_dump().items()},
            **{f"train.{k}": getattr(config.train, k) for k in ("eval_tasks", "eval_samples", "attention", "split",
                                                                  "micro_batch_tokens")}}


# what a record written before a key existed says of it
WARM_KEY_DEFAULTS: dict[str, Any] = {"mix": {}, "scaffold_mix": {}, "teacher_slips": 0.0, "teacher_rechecks": 0.0,
                                     "teacher_warmups": 0.0, "teacher_max_warmups": MAX_RECHECKS, "scaffold_options": {}}


def recorded_key(record: dict[str, Any], config: Any) -> dict[str, Any]:
    """What a warm copy's record says of each :func:`warm_key` item (a key older than the record: its default)."""
    return {k: record.get(k, WARM_KEY_DEFAULTS.get(k)) for k in warm_key(config)}


def warm_key(config: Any) -> dict[str, Any]:
    """What a warm copy is warm-started on (``warmstart.json`` records it; a run reuses only a match)."""
    return {"suite": config.rollout.task, "mix": dict(config.rollout.mix), "scaffold": config.rollout.scaffold,
            "scaffold_mix": dict(config.rollout.scaffold_mix),
            "scaffold_options": dict(config.scaffolds.get(config.rollout.scaffold) or {}),  # its prompts
            "teacher_slips": config.train.warmstart.teacher_slips, "teacher_rechecks": config.train.warmstart.teacher_rechecks,
            "teacher_warmups": config.train.warmstart.teacher_warmups,
            # the cap changes nothing without warm-ups: the traces, hence the key, are the default's
            "teacher_max_warmups": config.train.warmstart.teacher_max_warmups if config.train.warmstart.teacher_warmups
            else MAX_RECHECKS}

"""The loop's checkpoints: what it saves each time and how a resumed run picks up.

A checkpoint (:mod:`forge_cli.train.checkpoint`) is a Hugging Face model folder — with the
policy's tokenizer and chat template copied in, so ``forge gateway serve --model
RUN/checkpoints/step-N/model`` serves it — plus the optimizer, the RNG states, the step and the
policy version. Resuming (``forge train --resume RUN``):

1. the trainer's model loads the latest checkpoint's weights (before the train engine wraps it),
   its optimizer the checkpoint's state;
2. the groups consumed by steps after it (their updates died with the process) go back to the
   queue (``unconsume_after``), so each is trained exactly once;
3. the groups a killed driver left unrewarded are dropped (their trajectories were cut off, not
   failed by the agent); the gateway already failed the trajectories it left running;
4. the engine gets the checkpoint's weights as the checkpoint's policy version — or as the newest
   version anything in the pool was sampled by, if the dead process got further (those versions
   named weights that are gone: reusing them would give one version two policies) — and the pool
   is told it, so ages and admission go on.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

from forge_cli.engine.default_model import MARKER, TOKENIZER_FILES, resolve_model_path
from forge_cli.engine.hf import load_hf
from forge_cli.engine.weights import load_into
from forge_cli.errors import ForgeError
from forge_cli.records.metrics import read_state
from forge_cli.run import Run
from forge_cli.train.distributed import world

# what a servable copy of the policy (a checkpoint's model, a warm copy) takes from its source besides
# the weights: the tokenizer, and the embedded default's marker (engine/default_model.py: MARKER)
COPIED_FILES = (*TOKENIZER_FILES, MARKER)


def trainer_model(config: Any, run_dir: Path, resume: bool) -> Any:
    """The trainer's own copy of the policy (the engine holds another), in train mode — a resumed
    run's with the latest checkpoint's weights, loaded before the train engine wraps it (DeepSpeed
    copies them to every rank and into its own master weights at ``initialize``)."""
    model, _ = load_hf(resolve_model_path(config.model.path))
    pointer = Path(run_dir) / "checkpoints" / "latest"
    if resume and pointer.is_file():
        folder = pointer.parent / pointer.read_text().strip() / "model"
        try:
            load_into(model, folder)
        except (OSError, RuntimeError) as exc:
            raise ForgeError(f"cannot read checkpoint {folder}: {exc}") from None
    model.train()
    return model


def optimizer_of(trainer: Any) -> Any:
    """The optimizer whose state a checkpoint keeps (DeepSpeed's wrapper for a DeepSpeed engine)."""
    optimizer = getattr(trainer, "optimizer", None) or getattr(getattr(trainer, "engine", None), "optimizer", None)
    if optimizer is None:
        raise ForgeError(f"train engine {type(trainer).__name__} exposes no optimizer to checkpoint")
    return optimizer


async def restore(run: Run, trainer: Any, model: Any, resume: bool) -> tuple[int, int, float | None]:
    """Bring the run to its latest checkpoint (see the module's docstring); returns (step, policy
    version, best held-out success so far). A fresh run returns (0, the engine's version, None)."""
    from forge_cli.train.checkpoint import load_checkpoint

    root = run.dir / "checkpoints"
    if not resume:
        if (root / "latest").is_file():
            raise ForgeError(f"run {run.dir.name} already has checkpoints: continue it with --resume "
                             f"{run.dir.name}, or choose a new --run")
        return 0, run.engine.version, None
    state = await asyncio.to_thread(load_checkpoint, root, None, optimizer_of(trainer))  # weights: trainer_model
    await asyncio.to_thread(run.pool.drop_unrewarded)
    if state is None:  # killed before its first checkpoint: start over on what the pool holds
        await asyncio.to_thread(run.pool.unconsume_after, 0)
        step, version = 0, run.engine.version
    else:
        await asyncio.to_thread(run.pool.unconsume_after, state.policy_version)
        step = state.step
        # versions the dead process published after the checkpoint named weights that are gone: the
        # engine goes on past the newest one that sampled anything, so no version means two policies
        # and no recorded sample gets a negative age
        newest = await asyncio.to_thread(run.pool.max_policy_version)
        version = max(state.policy_version, newest if newest is not None else 0)
        weights = await asyncio.to_thread(trainer.state_dict)
        await run.engine.load_weights(weights, version=version)
    await asyncio.to_thread(run.pool.publish_version, version)
    best = read_state(run.dir).get("best_heldout_success")
    return step, version, best


async def save_step(config: Any, run_dir: Path, model: Any, trainer: Any, step: int, version: int) -> Path:
    """Checkpoint step ``step`` (trained into policy ``version``) off the event loop."""
    return await asyncio.to_thread(_save, config, Path(run_dir), model, trainer, step, version)


def _save(config: Any, run_dir: Path, model: Any, trainer: Any, step: int, version: int) -> Path:
    from forge_cli.train.checkpoint import TrainerState, save_checkpoint

    # with several trainer processes rank 0's optimizer holds only its own partition: its moments
    # are not kept (a resumed run starts them afresh), rather than kept wrong
    optimizer = optimizer_of(trainer) if world()[1] == 1 else None
    folder = save_checkpoint(run_dir / "checkpoints", model, optimizer, None, TrainerState(step=step, policy_version=version),
                             weights=trainer.state_dict())
    source = resolve_model_path(config.model.path)
    for name in COPIED_FILES:  # a servable model folder
        if (source / name).is_file():
            shutil.copy2(source / name, folder / "model" / name)
    return folder

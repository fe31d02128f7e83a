"""Checkpoints: resume after a crash with the identical next step.

A checkpoint folder ``step-00000012/`` holds the model in Hugging Face format (safetensors) and
``trainer_state.pt``: optimizer and LR-schedule state, every RNG's state, the step, the policy
version, and the pool's consumption cursor (the trainer version of the last consumed batch, for
``DataPool.unconsume_after``). It is written under a temporary name and renamed into place, then
``latest`` is replaced atomically — a process killed at any moment leaves either the previous
checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from forge_cli.engine.weights import load_into
from forge_cli.errors import ForgeError


@dataclass
class TrainerState:
    step: int
    policy_version: int
    pool_cursor: int | None = None


FIRST = f"step-{0:08d}"


def save_checkpoint(root: Path, model: Any, optimizer: Any, scheduler: Any, state: TrainerState, keep: int = 2,
                    weights: dict[str, Any] | None = None) -> Path:
    """Write checkpoint ``state.step``: ``model`` in HF format (with ``weights`` as its state dict if
    given: a gathered ZeRO-3 one), ``optimizer``'s state (None: not kept) and the RNGs; keep the newest
    ``keep`` checkpoints and step 0 (the policy the run started from), and remove the others."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{state.step:08d}"
    tmp = root / f".step-{state.step:08d}.writing"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp / "model", safe_serialization=True, **({"state_dict": weights} if weights is not None else {}))
    torch.save(
        {
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "rng": {"python": random.getstate(), "torch": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
            "state": state.__dict__,
        },
        tmp / "trainer_state.pt",
    )
    _fsync_tree(tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    pointer = root / ".latest.tmp"
    pointer.write_text(final.name)
    os.replace(pointer, root / "latest")
    for old in sorted(root.glob("step-*"))[:-keep]:
        if old.name != FIRST:  # the policy the run started from (after a warm start) is always kept
            shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(root: Path, model: Any, optimizer: Any, scheduler: Any = None) -> TrainerState | None:
    """Restore the latest checkpoint into ``model``/``optimizer``/``scheduler`` and the RNGs; None if
    there is none. ``model=None`` leaves the weights alone (a caller that loaded them already)."""
    root = Path(root)
    pointer = root / "latest"
    if not pointer.is_file():
        return None
    folder = root / pointer.read_text().strip()

    try:
        if model is not None:
            load_into(model, folder / "model")
        blob = torch.load(folder / "trainer_state.pt", weights_only=False)
    except (OSError, RuntimeError) as exc:
        raise ForgeError(f"cannot read checkpoint {folder}: {exc}") from None
    if optimizer is not None and blob["optimizer"] is not None:
        if type(optimizer).__module__.startswith("deepspeed"):  # a ZeRO optimizer takes one state per rank
            optimizer.load_state_dict([blob["optimizer"]], load_from_fp32_weights=False)
        else:
            optimizer.load_state_dict(blob["optimizer"])
    if scheduler is not None and blob["scheduler"] is not None:
        scheduler.load_state_dict(blob["scheduler"])
    random.setstate(blob["rng"]["python"])
    torch.set_rng_state(blob["rng"]["torch"])
    if blob["rng"]["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(blob["rng"]["cuda"])
    return TrainerState(**blob["state"])


def _fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

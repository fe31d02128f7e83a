"""Reading weights and loading them into a model: shared by the engines and checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forge_cli.errors import ForgeError


def read_weights(weights: Any) -> dict[str, Any]:
    """A state dict as given, or every ``*.safetensors`` of a folder merged into one."""
    if not isinstance(weights, (str, Path)):
        return weights
    from safetensors.torch import load_file

    files = sorted(Path(weights).glob("*.safetensors"))
    if not files:
        raise ForgeError(f"no *.safetensors in {weights}")
    merged: dict[str, Any] = {}
    for f in files:
        merged.update(load_file(str(f)))
    return merged


def load_into(model: Any, weights: Any) -> None:
    """Load a state dict (or a folder) into ``model``; a tied ``lm_head`` may be absent.

    Raises ForgeError when the weights do not fit the model.
    """
    import torch

    with torch.no_grad():
        missing, unexpected = model.load_state_dict(read_weights(weights), strict=False)
    real_missing = [m for m in missing if not m.endswith("lm_head.weight")]
    if real_missing or unexpected:
        raise ForgeError(f"weights do not fit the model: missing {real_missing[:3]}, unexpected {unexpected[:3]}")
    if missing and getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()

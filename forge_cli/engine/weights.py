"""Reading weights and loading them into a model: shared by the engines and checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forge_cli.errors import ForgeError


def read_weights(weights: Any) -> dict[str, Any]:
    """A state dict as given, or every ``*.safetensors`` of a folder merged into one.

    ForgeError for a path that cannot be read as one (missing, not a folder, a name too long,
    no permission, not safetensors): a caller's mistake, never an engine failure.
    """
    if not isinstance(weights, (str, Path)):
        return weights
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    shown = str(weights) if len(str(weights)) <= 200 else f"{str(weights)[:200]}… ({len(str(weights))} characters)"
    try:
        if not Path(weights).is_dir():
            raise ForgeError(f"no weights folder at {shown}")
        files = sorted(Path(weights).glob("*.safetensors"))
        if not files:
            raise ForgeError(f"no *.safetensors in {shown}")
        merged: dict[str, Any] = {}
        for f in files:
            merged.update(load_file(str(f)))
    except (OSError, SafetensorError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ForgeError(f"cannot read weights from {shown}: {reason}") from None
    return merged


def load_into(model: Any, weights: Any) -> None:
    """Load a state dict (or a folder) into ``model``; a tied ``lm_head`` may be absent.

    Raises ForgeError, with the model untouched, when the weights do not fit it: every name and
    shape is checked before the first tensor is copied.
    """
    import torch

    state = read_weights(weights)
    check_fit({k: tuple(v.shape) for k, v in model.state_dict().items()}, state)
    with torch.no_grad():
        missing, _ = model.load_state_dict(state, strict=False)
    if missing and getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()


def check_fit(shapes: dict[str, tuple[int, ...]], state: dict[str, Any]) -> None:
    """ForgeError unless ``state`` has exactly the tensors of ``shapes`` (the model's names and
    shapes; a tied ``lm_head`` may be absent), each of its shape."""
    missing = [k for k in shapes if k not in state and not k.endswith("lm_head.weight")]
    unexpected = [k for k in state if k not in shapes]
    if missing or unexpected:
        raise ForgeError(f"weights do not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
    wrong = [f"{k} {tuple(v.shape)} (model {shapes[k]})" for k, v in state.items() if tuple(v.shape) != tuple(shapes[k])]
    if wrong:
        raise ForgeError(f"weights do not fit the model: shapes differ for {', '.join(wrong[:3])}")


def folder_shapes(folder: str | Path) -> dict[str, tuple[int, ...]]:
    """Names and shapes of a model folder's ``*.safetensors``, from their headers (no tensor read)."""
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as handle:
            for key in handle.keys():
                shapes[key] = tuple(handle.get_slice(key).get_shape())
    return shapes

"""Forge's methods in vLLM's workers: vLLM's ``worker_extension_cls`` mixes :class:`ForgeWorkerExtension`
into each worker, and the engine calls them with ``collective_rpc`` (whatever process the worker is in:
vLLM's engine core, forked or spawned, or a GPU worker of its own).

One so far: at every in-place weight reload vLLM warns ``RotaryEmbedding: Failed to load weights`` for
each rotary embedding that holds no parameter — its cos/sin cache is computed, never in a checkpoint —
and then puts back the cache it had, which is right. A run that pushes weights every step would print
it hundreds of times. :func:`weightless_layers` finds those classes in the worker's own model (a
rotary embedding with parameters, such as vLLM's ``FourierRotaryEmbedding`` with its coefficients, is
not one of them) and :class:`WeightlessLayerFilter` drops the warning for them only: any other layer
that fails to load still warns.

Imported by vLLM in its worker processes: nothing heavy here.
"""

from __future__ import annotations

import logging
from typing import Any

RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"  # where vLLM logs the line
RELOAD_WARNING = "%s: Failed to load weights"  # vLLM's format string; its one argument, the layer's class name


class WeightlessLayerFilter(logging.Filter):
    """Drops vLLM's reload warning for the layer classes ``layers`` (and keeps every other record)."""

    def __init__(self, layers: frozenset[str]) -> None:
        super().__init__()
        self.layers = layers

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != RELOAD_WARNING or not isinstance(record.args, tuple) or len(record.args) != 1:
            return True
        return str(record.args[0]) not in self.layers


def weightless_layers(model: Any) -> frozenset[str]:
    """The class names of ``model``'s rotary embeddings that hold buffers (what vLLM tries to reload, and
    warns about) and, in none of their layers, a parameter of their own."""
    weightless: set[str] = set()
    weighted: set[str] = set()
    for module in model.modules():
        name = type(module).__name__
        if "Rotary" not in name:
            continue
        if any(True for _ in module.parameters(recurse=False)):
            weighted.add(name)
        elif any(True for _ in module.buffers(recurse=False)):
            weightless.add(name)
    return frozenset(weightless - weighted)


def quiet_weightless_reload_warnings(model: Any) -> list[str]:
    """Installs :class:`WeightlessLayerFilter` for ``model``'s weightless layers on vLLM's reload logger
    in this process (replacing one installed before); the class names it drops the warning for."""
    layers = weightless_layers(model)
    logger = logging.getLogger(RELOAD_LOGGER)
    for old in [f for f in logger.filters if isinstance(f, WeightlessLayerFilter)]:
        logger.removeFilter(old)
    logger.addFilter(WeightlessLayerFilter(layers))
    return sorted(layers)


class ForgeWorkerExtension:
    """Mixed into vLLM's worker class (``worker_extension_cls``); each method is a ``collective_rpc`` target."""

    def forge_quiet_reload_warnings(self) -> list[str]:
        return quiet_weightless_reload_warnings(self.get_model())  # type: ignore[attr-defined]  # the worker's

"""Forge's methods in vLLM's workers: vLLM's ``worker_extension_cls`` mixes :class:`ForgeWorkerExtension`
into each worker, and the engine calls them with ``collective_rpc`` (whatever process the worker is in:
vLLM's engine core, forked or spawned, or a GPU worker of its own).

One so far: at every in-place weight reload vLLM warns ``RotaryEmbedding: Failed to load weights`` for
each rotary embedding, whose cos/sin cache is computed, never in a checkpoint, and which vLLM then
puts back as it was — what is right. A run that pushes weights every step would print it hundreds of
times; :class:`WeightlessLayerFilter` drops that line and only that line (another layer that fails to
load still warns).

Imported by vLLM in its worker processes: nothing heavy here.
"""

from __future__ import annotations

import logging

RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"  # where vLLM logs the line
RELOAD_WARNING = "%s: Failed to load weights"  # vLLM's format string; its one argument, the layer's class name
WEIGHTLESS_LAYERS = ("RotaryEmbedding",)  # class names ending so: layers with nothing to load


class WeightlessLayerFilter(logging.Filter):
    """Drops vLLM's reload warning for layers that have no weights to load (:data:`WEIGHTLESS_LAYERS`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != RELOAD_WARNING or not isinstance(record.args, tuple) or len(record.args) != 1:
            return True
        return not str(record.args[0]).endswith(WEIGHTLESS_LAYERS)


def quiet_weightless_reload_warnings() -> bool:
    """Installs :class:`WeightlessLayerFilter` on vLLM's reload logger in this process (once); True when
    it is there."""
    logger = logging.getLogger(RELOAD_LOGGER)
    if not any(isinstance(f, WeightlessLayerFilter) for f in logger.filters):
        logger.addFilter(WeightlessLayerFilter())
    return True


class ForgeWorkerExtension:
    """Mixed into vLLM's worker class (``worker_extension_cls``); each method is a ``collective_rpc`` target."""

    def forge_quiet_reload_warnings(self) -> bool:
        return quiet_weightless_reload_warnings()

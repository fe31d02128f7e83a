"""Forge's vLLM worker extension: the filter that drops vLLM's reload warning for weightless layers, checked
against the line vLLM itself logs (its module, its format string), and the extension's place among vLLM's
worker methods. The live half (the engine installs it in its worker at the first weight push) is in
test_engine_vllm.py."""

from __future__ import annotations

import inspect
import logging

import pytest

from forge_cli.engine.vllm_worker import (RELOAD_LOGGER, RELOAD_WARNING, ForgeWorkerExtension, WeightlessLayerFilter,
                                          quiet_weightless_reload_warnings)


def _record(msg: str, args: tuple, name: str = RELOAD_LOGGER) -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, "layerwise.py", 266, msg, args, None)


def test_vllm_logs_the_line_the_filter_knows():
    """The logger's name and the format string are vLLM's own: if vLLM renames either, this fails
    instead of the filter silently letting the flood through."""
    layerwise = pytest.importorskip("vllm.model_executor.model_loader.reload.layerwise")
    assert layerwise.logger.name == RELOAD_LOGGER
    assert f'logger.warning("{RELOAD_WARNING}", layer.__class__.__name__)' in inspect.getsource(layerwise)


@pytest.mark.parametrize("layer, kept", [("RotaryEmbedding", False), ("Llama3RotaryEmbedding", False),
                                         ("MRotaryEmbedding", False), ("QKVParallelLinear", True),
                                         ("RMSNorm", True), ("RotaryEmbeddingWrapper", True)])
def test_only_weightless_layers_lose_their_warning(layer, kept):
    assert WeightlessLayerFilter().filter(_record(RELOAD_WARNING, (layer,))) is kept


@pytest.mark.parametrize("msg, args", [("%s: Delayed processing", ("RotaryEmbedding",)),
                                       ("RotaryEmbedding: Failed to load weights", ()),
                                       (RELOAD_WARNING, ("RotaryEmbedding", "extra"))])
def test_every_other_line_is_kept(msg, args):
    assert WeightlessLayerFilter().filter(_record(msg, args)) is True


def test_installing_twice_adds_one_filter_and_the_line_is_gone(caplog):
    logger = logging.getLogger(RELOAD_LOGGER)
    before = list(logger.filters)
    try:
        assert quiet_weightless_reload_warnings() and quiet_weightless_reload_warnings()
        assert sum(isinstance(f, WeightlessLayerFilter) for f in logger.filters) == 1
        with caplog.at_level(logging.WARNING, logger=RELOAD_LOGGER):
            logger.warning(RELOAD_WARNING, "RotaryEmbedding")
            logger.warning(RELOAD_WARNING, "QKVParallelLinear")
        assert [r.getMessage() for r in caplog.records] == ["QKVParallelLinear: Failed to load weights"]
    finally:
        logger.filters[:] = before


def test_the_extension_adds_only_its_own_names_to_vllms_worker():
    """vLLM refuses an extension whose attribute a worker already has; ours are all ``forge_``-named."""
    names = [n for n in vars(ForgeWorkerExtension) if not n.startswith("__")]
    assert names and all(n.startswith("forge_") for n in names)

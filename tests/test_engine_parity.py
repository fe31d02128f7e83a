"""Engines agree with the trainer's model: the logprob of every sampled id is log_softmax(logits/T)."""

from __future__ import annotations

import asyncio

import pytest

from forge_cli.engine.base import SamplingParams
from forge_cli.engine.hf import HFEngine, load_hf, token_logprobs
from forge_cli.errors import ForgeError
from tests.waiting import until


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


def plain_top(model, prompt, output_ids, temperature, k):
    """The k most likely (id, logprob) at each output position, from one plain forward."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([prompt + output_ids])).logits[0, len(prompt) - 1 : -1].float()
    values, ids = torch.log_softmax(logits / (temperature or 1.0), -1).topk(k)
    return [list(zip(i.tolist(), v.tolist())) for i, v in zip(ids, values)]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_hf_engine_top_logprobs(tiny_model, temperature):
    model, tok = load_hf(tiny_model)

    async def run():
        engine = HFEngine(tiny_model)
        prompt = tok.encode("<|im_start|>user\nname three colours<|im_end|>\n<|im_start|>assistant\n")
        [with_top] = await engine.generate(prompt, SamplingParams(max_tokens=12, temperature=temperature, seed=3, top_logprobs=4))
        [without] = await engine.generate(prompt, SamplingParams(max_tokens=12, temperature=temperature, seed=3))
        await engine.close()
        return prompt, with_top, without

    prompt, with_top, without = asyncio.run(run())
    assert without.top_logprobs is None and with_top.output_ids == without.output_ids
    want = plain_top(model, prompt, with_top.output_ids, temperature, 4)
    assert len(with_top.top_logprobs) == len(with_top.output_ids)
    for got, exp, tok_id, lp in zip(with_top.top_logprobs, want, with_top.output_ids, with_top.logprobs):
        assert [i for i, _ in got] == [i for i, _ in exp]
        assert [v for _, v in got] == pytest.approx([v for _, v in exp], abs=1e-5)
        assert got[0][1] >= lp - 1e-6  # nothing is likelier than the most likely
        if temperature == 0:
            assert got[0][0] == tok_id  # greedy picks the top


def test_top_logprobs_bounds():
    with pytest.raises(ForgeError, match="top_logprobs"):
        SamplingParams(top_logprobs=21)
    with pytest.raises(ForgeError, match="top_logprobs"):
        SamplingParams(top_logprobs=-1)


def test_hf_engine_streams_ids_as_they_are_sampled(tiny_model, monkeypatch):
    """Ids arrive while sampling runs (not all at the end), add up to the final output, and equal an
    unstreamed generation with the same seed; a second request batched alongside is unaffected."""
    import threading

    from forge_cli.engine import hf

    real_sample = hf._sample
    # the streamed request's sampler in lockstep with its reader: its next id is sampled only once the
    # reader has the ones before (an engine that sent everything at the end would never get there)
    delivered = threading.Semaphore(0)
    gated = {"on": True, "sampled": 0}

    def sample(logits, params, gen):
        if params.seed == 7 and gated["on"]:
            if gated["sampled"]:
                assert delivered.acquire(timeout=120), "an id was not streamed before the next was sampled"
            gated["sampled"] += 1
        return real_sample(logits, params, gen)

    monkeypatch.setattr(hf, "_sample", sample)
    model, tok = load_hf(tiny_model)

    async def run():
        engine = HFEngine(tiny_model)
        prompt = tok.encode("<|im_start|>user\ntell me a story<|im_end|>\n<|im_start|>assistant\n")
        params = SamplingParams(max_tokens=16, temperature=0.9, seed=7)
        chunks, final, arrivals = [], None, []

        async def consume():
            nonlocal final
            async for item in engine.generate_stream(prompt, params):
                if isinstance(item, list):
                    chunks.append(item)
                    arrivals.append(asyncio.get_running_loop().time())
                    for _ in item:
                        delivered.release()
                else:
                    final = item

        other = engine.generate(prompt, SamplingParams(max_tokens=16, temperature=0.9, seed=8))
        _, [beside] = await asyncio.gather(consume(), other)
        gated["on"] = False  # the unstreamed run of the same seed goes at its own pace
        [plain] = await engine.generate(prompt, params)
        await engine.close()
        return prompt, chunks, final, plain, beside, arrivals

    prompt, chunks, final, plain, beside, arrivals = asyncio.run(run())
    assert [i for c in chunks for i in c] == final.output_ids == plain.output_ids
    assert final.logprobs == pytest.approx(plain.logprobs, abs=1e-5)
    assert len(chunks) > 2 and arrivals[-1] > arrivals[0]  # several pieces, over time
    assert beside.logprobs == pytest.approx(token_logprobs(model, prompt, beside.output_ids, 0.9), abs=1e-5)


def test_hf_engine_stops_sampling_for_a_caller_that_went_away(tiny_model, monkeypatch):
    """A client that disconnects mid-stream (or a cancelled request) frees the batch: its rows stop
    instead of running to max_tokens while every later request waits behind them."""
    import threading

    from forge_cli.engine import hf

    sampled = []
    real_sample = hf._sample
    # the sampler waits at two moments for the caller to go away, so the abandoned rows are seen
    # mid-generation on any machine: the stream's 2nd id until its client has closed it, the
    # unstreamed request's first id until it is cancelled
    closed, started, given_up = threading.Event(), threading.Event(), threading.Event()

    def sample(*a):
        sampled.append(1)
        if len(sampled) == 2:
            assert closed.wait(120), "the stream was never closed"
        elif len(sampled) == 3:
            started.set()
            assert given_up.wait(120), "the request was never cancelled"
        return real_sample(*a)

    monkeypatch.setattr(hf, "_sample", sample)
    model, tok = load_hf(tiny_model)
    prompt = tok.encode("<|im_start|>user\nwrite a very long essay<|im_end|>\n<|im_start|>assistant\n")
    long = SamplingParams(max_tokens=400, temperature=1.0, seed=1)

    async def run():
        engine = HFEngine(tiny_model)
        engine.eos_token_id = None  # nothing ends the long request early but its caller leaving
        try:
            stream = engine.generate_stream(prompt, long)
            await stream.__anext__()  # the first id: sampling is under way
            await stream.aclose()  # the client disconnects
            closed.set()
            cancelled = asyncio.ensure_future(engine.generate(prompt, long))
            await until(started.is_set, what="the second request's sampling to start")
            cancelled.cancel()  # an unstreamed request whose caller gives up
            with pytest.raises(asyncio.CancelledError):
                await cancelled
        finally:
            closed.set()
            given_up.set()
        await engine.generate(prompt, SamplingParams(max_tokens=2))
        await engine.close()

    asyncio.run(run())
    assert len(sampled) < 200  # two abandoned requests of 400 ids each would have sampled 800

"""Every engine ends at, and reports, the stop string that occurs earliest in the text — not the
first one of the request's list that happens to be found."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_cli.engine.base import SamplingParams, first_stop

SMOLAGENTS_TEXT = "Thought: I print it.\n<code>\nprint(1)\n</code>\nObservation: 1\n"
SMOLAGENTS_STOPS = ("Observation:", "</code>")  # the order smolagents sends them in

# a small alphabet: random stops overlap, nest and repeat often
texts = st.text(alphabet="ab<>/\n", min_size=1, max_size=24)
stop_lists = st.lists(st.text(alphabet="ab<>/\n", min_size=1, max_size=4), min_size=1, max_size=4)


def plain_cut(text: str, stops) -> tuple[int, str] | None:
    """The plain computation: the least ``text.find(stop)`` over the stops that occur; of those
    starting there, the longest."""
    found = [(text.find(s), s) for s in stops if s and s in text]
    if not found:
        return None
    at = min(a for a, _ in found)
    return at, max((s for a, s in found if a == at), key=len)


def test_first_stop_is_the_earliest_whatever_the_list_order():
    at = SMOLAGENTS_TEXT.index("</code>")
    assert first_stop(SMOLAGENTS_TEXT, SMOLAGENTS_STOPS) == (at, "</code>")
    assert first_stop(SMOLAGENTS_TEXT, SMOLAGENTS_STOPS[::-1]) == (at, "</code>")
    assert first_stop("xabcd", ("bc", "abcd", "ab")) == (1, "abcd")  # same start: the longest
    assert first_stop("abc", ("", "z")) is None  # an empty stop never matches


@given(texts, stop_lists)
def test_first_stop_is_the_plain_computation(text, stops):
    assert first_stop(text, stops) == plain_cut(text, stops)
    assert first_stop(text, stops[::-1]) == plain_cut(text, stops)


# ---- scripted -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scripted(tiny_model):
    from forge_cli.engine.scripted import ScriptedEngine

    engine = ScriptedEngine(tiny_model, lambda context: context["reply"])
    loop = asyncio.new_event_loop()
    prompt = engine.tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")

    def run(reply: str, stops) -> object:
        [out] = loop.run_until_complete(engine.generate(prompt, SamplingParams(max_tokens=200, stop=tuple(stops)),
                                                        context={"reply": reply}))
        return out

    yield engine, run
    loop.close()


def test_scripted_cuts_at_the_earliest_stop_of_a_smolagents_list(scripted):
    engine, run = scripted
    out = run(SMOLAGENTS_TEXT, SMOLAGENTS_STOPS)
    assert out.finish_reason == "stop" and out.stop_reason == "</code>"
    assert engine.tokenizer.decode(out.output_ids) == SMOLAGENTS_TEXT[: SMOLAGENTS_TEXT.index("</code>") + len("</code>")]


def test_scripted_decode_time_is_emulated_per_output_token_without_the_cpu(scripted):
    """decode_s_per_token: a call comes back no sooner than its output tokens' time, and the event loop
    stays free meanwhile (a sleep, not work)."""
    import time

    engine, run = scripted
    engine.decode_s_per_token = 0.02
    try:
        loop = asyncio.new_event_loop()
        prompt = engine.tokenizer.encode("hi")
        ticks = []

        async def tick():  # yields to the loop and notes when it got it back, until cancelled
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0)

        async def call():
            ticker = asyncio.ensure_future(tick())
            started = time.monotonic()
            outs = await engine.generate(prompt, SamplingParams(max_tokens=200, n=2), context={"reply": "one two three"})
            ended = time.monotonic()
            ticker.cancel()
            return outs, started, ended

        outs, started, ended = loop.run_until_complete(call())
        loop.close()
    finally:
        engine.decode_s_per_token = 0.0
    longest = max(len(o.output_ids) for o in outs)
    took = ended - started
    # the emulated time is a lower bound (a slower machine only adds to it); the loop ran in the
    # second half of the call, which a call that held the loop (work, or time.sleep) would not let it
    assert took >= 0.02 * longest
    assert any(started + 0.01 * longest <= t < ended for t in ticks)  # the loop ran meanwhile


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts, stop_lists)
def test_scripted_cut_is_the_plain_computation(scripted, text, stops):
    engine, run = scripted
    out = run(text, stops)
    cut = plain_cut(text, stops)
    if cut is None:  # no stop: the whole reply and EOS
        assert out.output_ids[-1] == engine.eos_token_id and out.stop_reason == engine.eos_token_id
        assert engine.tokenizer.decode(out.output_ids[:-1]) == text
    else:
        at, stop = cut
        assert out.stop_reason == stop and engine.tokenizer.decode(out.output_ids) == text[: at + len(stop)]


# ---- hf: the ids are forced, so the stop logic is what is tested ----------------------------------


@pytest.fixture(scope="module")
def forced_hf(tiny_model):
    """An hf engine whose sampler emits given texts' ids (by seed), with their real logprobs."""
    import torch

    from forge_cli.engine import hf

    engine = hf.HFEngine(tiny_model)
    forced: dict[int, list[int]] = {}
    made: dict[int, int] = {}

    def fake_sample(logits, params, gen):
        i = made.get(params.seed, 0)
        made[params.seed] = i + 1
        ids = forced[params.seed]
        tok = ids[i] if i < len(ids) else engine.eos_token_id
        return tok, float(torch.log_softmax(logits, -1)[tok]), []

    real, hf._sample = hf._sample, fake_sample
    loop = asyncio.new_event_loop()
    prompt = engine.tokenizer.encode("hello")
    seeds = iter(range(10**6))

    def run(text: str, stops) -> object:
        seed = next(seeds)
        forced[seed] = engine.tokenizer.encode(text, add_special_tokens=False)
        params = SamplingParams(max_tokens=200, temperature=0, stop=tuple(stops), seed=seed)
        [out] = loop.run_until_complete(engine.generate(prompt, params))
        return out

    yield engine, run
    hf._sample = real
    loop.run_until_complete(engine.close())
    loop.close()


def test_hf_cuts_at_the_earliest_stop_of_a_smolagents_list(forced_hf):
    engine, run = forced_hf
    out = run(SMOLAGENTS_TEXT, SMOLAGENTS_STOPS)
    assert out.finish_reason == "stop" and out.stop_reason == "</code>"
    assert engine.tokenizer.decode(out.output_ids) == SMOLAGENTS_TEXT[: SMOLAGENTS_TEXT.index("</code>") + len("</code>")]


def test_hf_reports_the_earliest_of_stops_ending_in_the_same_step(forced_hf):
    """'bc' is listed first, but 'abc' starts earlier: both complete with the id of 'c'."""
    engine, run = forced_hf
    out = run("xabcdef", ("bc", "abc"))
    assert out.stop_reason == "abc" and engine.tokenizer.decode(out.output_ids) == "xabc"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts, stop_lists)
def test_hf_stop_is_the_plain_computation(forced_hf, text, stops):
    """An engine that samples stops at the first step whose text holds a stop, and reports the
    earliest stop in that text."""
    engine, run = forced_hf
    out = run(text, stops)
    ids = engine.tokenizer.encode(text, add_special_tokens=False)
    got = engine.tokenizer.decode(out.output_ids)
    if out.output_ids[-1] == engine.eos_token_id:  # the text ran out without a stop
        assert out.output_ids[:-1] == ids and plain_cut(text, stops) is None
        return
    assert out.output_ids == ids[: len(out.output_ids)]
    assert plain_cut(engine.tokenizer.decode(out.output_ids[:-1]), stops) is None  # no earlier step held one
    cut = plain_cut(got, stops)
    assert cut is not None and out.stop_reason == cut[1]


# ---- vLLM: its reported stop is recomputed (no vLLM is started) ----------------------------------


def test_vllm_reports_the_earliest_stop_not_the_first_to_end(tiny_model):
    """vLLM picks, of the stops in one step, the one that ends first ('bc' in 'xabc'); the engine
    reports the one that starts first, as the others do."""
    from transformers import AutoTokenizer

    from forge_cli.engine.vllm import VLLMEngine

    engine = VLLMEngine.__new__(VLLMEngine)  # only _output is used: no vLLM needed
    engine.tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    ids = engine.tokenizer.encode("xabc", add_special_tokens=False)
    step = {i: SimpleNamespace(logprob=-0.5, rank=1) for i in ids}
    vllm_out = SimpleNamespace(token_ids=ids, logprobs=[step] * len(ids), finish_reason="stop", stop_reason="bc")
    params = SamplingParams(stop=("bc", "abc"))
    out = engine._output(vllm_out, 3, 0, params)
    assert out.stop_reason == "abc" and out.output_ids == ids and out.finish_reason == "stop"
    eos = SimpleNamespace(token_ids=ids, logprobs=[step] * len(ids), finish_reason="stop", stop_reason=None)
    assert engine._output(eos, 3, 0, params).stop_reason is None  # EOS: nothing to recompute

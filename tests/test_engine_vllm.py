"""The vLLM engine behind a live gateway: parity with transformers, in-place weight updates.

One vLLM start (≈ 20 s on this CPU) serves the whole module; everything goes through HTTP.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx
import pytest
import torch

from forge_cli.engine.hf import load_hf, token_logprobs
from forge_cli.gateway.state import GatewayState
from forge_cli.pool.store import DataPool
from forge_cli.pool.types import Sample
from forge_cli.train.step import train_step
from tests.conftest import LiveGateway, tool_formats

pytestmark = pytest.mark.slow
TOL = 2e-4  # float32 kernels differ between vLLM's CPU path and transformers' SDPA


@pytest.fixture(scope="module")
def stack(tiny_model, tmp_path_factory):
    from forge_cli.engine.vllm import VLLMEngine

    engine = VLLMEngine(tiny_model, max_model_len=1024)
    pool = DataPool.sqlite(tmp_path_factory.mktemp("vllm") / "pool.sqlite")
    live = LiveGateway(GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, admin_key="admin"))
    model, tok = load_hf(tiny_model)
    yield live, pool, model, tok
    live.stop()
    asyncio.run(engine.close())
    pool.close()


def _completions(live, key, prompt_ids, temperature, n=1, max_tokens=16):
    r = httpx.post(f"{live.url}/v1/completions", headers={"Authorization": f"Bearer {key}"}, timeout=120,
                   json={"prompt": prompt_ids, "max_tokens": max_tokens, "temperature": temperature, "n": n, "logprobs": 0})
    assert r.status_code == 200, r.text
    return r.json()


def _recorded(live, pool, key):
    return pool.trajectory(live.state.sessions[live.state.by_key[key]].trajectory_id).completions


def test_vllm_logprobs_match_transformers(stack):
    live, pool, model, tok = stack
    prompt = tok.encode("<|im_start|>user\nWhat is the weather like today?<|im_end|>\n<|im_start|>assistant\n")
    for t in (0.7, 1.0):
        _completions(live, f"p{t}", prompt, t, n=2)
        for c in _recorded(live, pool, f"p{t}"):
            assert c.output_logprobs == pytest.approx(token_logprobs(model, prompt, c.output_ids, t), abs=TOL)


def test_vllm_top_logprobs_match_transformers(stack):
    from forge_cli.engine.hf import score

    live, pool, model, tok = stack
    r = live.openai("top").chat.completions.create(model="forge", messages=[{"role": "user", "content": "List some fruit."}],
                                                   max_tokens=8, temperature=0.8, logprobs=True, top_logprobs=3)
    [c] = _recorded(live, pool, "top")
    _, want = score(model, c.prompt_ids, c.output_ids, 0.8, top=3)
    got = r.choices[0].logprobs.content
    assert len(got) == len(want) == len(c.output_ids)
    for g, w in zip(got, want):  # the same 3 most likely, in order, with the same values
        assert [t.logprob for t in g.top_logprobs] == pytest.approx([v for _, v in w], abs=TOL)
        assert [t.token for t in g.top_logprobs] == [tok.decode([i], skip_special_tokens=False) for i, _ in w]


def test_chat_over_vllm(stack):
    live, pool, model, tok = stack
    messages = [{"role": "user", "content": "hello"}]
    r = live.openai("chat").chat.completions.create(model="forge", messages=messages, max_tokens=12, temperature=0.9)
    [c] = _recorded(live, pool, "chat")
    assert tok.decode(c.prompt_ids) == tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert c.output_logprobs == pytest.approx(token_logprobs(model, c.prompt_ids, c.output_ids, 0.9), abs=TOL)
    assert r.usage.completion_tokens == len(c.output_ids)


def test_weight_update_in_place(stack, tmp_path):
    live, pool, model, tok = stack
    prompt = tok.encode("<|im_start|>user\nsame prompt before and after<|im_end|>\n<|im_start|>assistant\n" * 3)
    _completions(live, "before", prompt, 1.0)  # fills the prefix cache with the old weights
    # one real train step (CISPO, prefix-tree path) on what the engine just sampled and recorded
    [done] = _recorded(live, pool, "before")
    sample = Sample(list(done.prompt_ids) + list(done.output_ids), len(done.prompt_ids), list(done.output_logprobs),
                    [1.0] * len(done.output_ids))
    model.train()
    stats = train_step(model, torch.optim.AdamW(model.parameters(), lr=1e-2), [sample],
                       SimpleNamespace(type="cispo", eps_low=1e6, eps_high=0.28, token_mask=False))
    model.eval()
    assert stats.mean_ratio == pytest.approx(1.0, abs=1e-3)  # trainer and engine agreed before the step
    model.save_pretrained(tmp_path, safe_serialization=True)
    r = httpx.post(f"{live.url}/admin/weights", headers={"Authorization": "Bearer admin"}, json={"path": str(tmp_path)}, timeout=120)
    assert r.status_code == 200 and r.json()["version"] == 1
    # the worker found the model's weightless layers and drops vLLM's reload line for them (vllm_worker.py)
    assert live.state.engine.quieted_layers == ["RotaryEmbedding"]
    _completions(live, "after", prompt, 1.0)
    [c] = _recorded(live, pool, "after")
    assert c.policy_version == 1
    assert c.output_logprobs == pytest.approx(token_logprobs(model, prompt, c.output_ids, 1.0), abs=TOL)


def test_chat_streams_while_vllm_samples(stack):
    live, pool, model, tok = stack
    chunks = list(live.openai("stream").chat.completions.create(
        model="forge", messages=[{"role": "user", "content": "tell me a story"}], max_tokens=48, temperature=1.0, stream=True))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    [c] = _recorded(live, pool, "stream")
    ids = c.output_ids[:-1] if c.output_ids and c.output_ids[-1] == tok.eos_token_id else c.output_ids
    assert "".join(pieces) == tok.decode(ids)
    assert len(pieces) > 3  # it arrived in many pieces, not one

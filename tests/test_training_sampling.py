"""Sampling that training can trust (issue 10 §5): a training session samples over the whole
vocabulary whatever the agent asks, so the recorded logprobs are the trainer's; an ad-hoc one keeps
what it asked and the trainer refuses it. Through real HTTP to a real gateway on the hf engine,
then the pool, the scheduler's take, :mod:`forge_cli.train.batch` and the train step's forward."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from forge_cli.records.session import SessionRequest
from forge_cli.engine.hf import HFEngine, load_hf
from forge_cli.errors import ForgeError
from forge_cli.gateway.state import GatewayState
from forge_cli.pool.store import DataPool
from forge_cli.train.batch import build_samples
from tests.conftest import LiveGateway, tool_formats

ADMIN = {"Authorization": "Bearer admin-secret"}
MESSAGES = [{"role": "user", "content": "Tell me a long story about a fox."}]
ASK = {"temperature": 0.8, "top_p": 0.5, "max_tokens": 48, "n": 2, "top_k": 5, "presence_penalty": 0.5}
NUCLEUS_SLACK = 1e-3  # a plain forward and the engine's cached decode differ by float rounding


@pytest.fixture(scope="module")
def engine(tiny_model):
    eng = HFEngine(tiny_model, max_model_len=512)
    yield eng
    asyncio.run(eng.close())


@pytest.fixture(scope="module")
def trainer_model(tiny_model):
    """The trainer's own copy of the weights (not the engine's)."""
    return load_hf(tiny_model)[0]


@pytest.fixture
def gateway(engine, tmp_path):
    pool = DataPool.sqlite(tmp_path / "pool.sqlite")
    live = LiveGateway(GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, auth="strict", admin_key="admin-secret"))
    yield live, pool
    live.stop()
    pool.close()


def _episode(live, *, training: bool | None):
    """Open a session (``training`` as given, or left out of the body), make the call, finish it;
    return the trajectory id and the response."""
    body = {"task_id": "story"} if training is None else {"task_id": "story", "training": training}
    opened = httpx.post(f"{live.url}/admin/sessions", json=body, headers=ADMIN, timeout=30).json()
    assert opened["training"] is bool(training)
    r = httpx.post(f"{opened['base_url']}/chat/completions", json={"messages": MESSAGES, **ASK},
                   headers={"Authorization": f"Bearer {opened['api_key']}"}, timeout=120)
    assert r.status_code == 200, r.text
    done = httpx.post(f"{live.url}/admin/sessions/{opened['session']}/finish", json={"rewards": {"outcome": 1.0}},
                      headers=ADMIN, timeout=30)
    assert done.status_code == 200, done.text
    return opened["trajectory_id"], r.json()


def _mass_before(model, completion, temperature):
    """Per output position, the probability (at ``temperature``) of the ids more likely than the
    sampled one: the id is in the top-p nucleus iff this is below top_p."""
    import torch

    ids = torch.tensor([completion.prompt_ids + completion.output_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(completion.prompt_ids) - 1 : -1]
    probs = torch.softmax(logits / temperature, dim=-1)
    chosen = probs.gather(-1, torch.tensor(completion.output_ids)[:, None])
    return (probs * (probs > chosen)).sum(-1).tolist()


def test_a_training_session_samples_as_the_trainer_computes(gateway, trainer_model):
    _check_training_session(*gateway, trainer_model)


@pytest.mark.slow
def test_on_vllm_a_training_session_samples_as_the_trainer_computes(tiny_model, trainer_model, tmp_path):
    """Where it matters most: vLLM's logprobs after top_p < 1 are renormalised over the nucleus, so only
    top_p = 1 gives the trainer's; an ad-hoc session on it keeps its nucleus and is refused."""
    from forge_cli.engine.vllm import VLLMEngine

    engine = VLLMEngine(tiny_model, max_model_len=512)
    pool = DataPool.sqlite(tmp_path / "pool.sqlite")
    live = LiveGateway(GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, auth="strict", admin_key="admin-secret"))
    try:
        _check_training_session(live, pool, trainer_model)
        tid, _ = _episode(live, training=False)
        (c, *_) = pool.trajectory(tid).completions
        assert c.sampling.top_p == 0.5 and c.sampling.training is False
        with pytest.raises(ForgeError, match="ad-hoc session"):
            build_samples(pool.take_batch(4, trainer_version=0, window=None), {c.id: 1.0})
    finally:
        live.stop()
        pool.close()
        asyncio.run(engine.close())


def _check_training_session(live, pool, trainer_model):
    from forge_cli.train.prefix_tree import pack, unpack_terms
    from forge_cli.train.step import packed_logprobs

    tid, _ = _episode(live, training=True)
    completions = pool.trajectory(tid).completions
    assert len(completions) == 2
    for c in completions:
        assert c.sampling.top_p == 1.0 and c.sampling.temperature == 0.8 and c.sampling.training is True
        assert c.sampling.asked == ASK  # what was asked, verbatim
        assert "top_k" not in c.sampling.as_dict() and "presence_penalty" not in c.sampling.as_dict()  # asked, not applied
    batch = pool.take_batch(4, trainer_version=0, window=None)
    got = build_samples(batch, {c.id: 1.0 for c in completions})
    assert got.temperature == 0.8 and got.ages == [0, 0] and [s.completion_id for s in got.samples] == [c.id for c in completions]
    micro = pack(got.samples)
    trainer = unpack_terms(got.samples, micro, [packed_logprobs(trainer_model, m, got.temperature).tolist() for m in micro])
    for sample, theirs in zip(got.samples, trainer):
        assert theirs == pytest.approx(list(sample.old_logprobs), abs=5e-4)  # the CISPO ratio starts at 1
    # and it really sampled over the whole vocabulary: with top_p = 0.5 some ids would be out of reach
    outside = [m for c in completions for m in _mass_before(trainer_model, c, 0.8) if m > 0.5 + NUCLEUS_SLACK]
    assert outside, "every sampled id was inside the top-p 0.5 nucleus: top_p = 1 was not used"


@pytest.mark.parametrize("training", [False, None])
def test_an_adhoc_session_keeps_what_it_asked_and_the_trainer_refuses_it(gateway, trainer_model, training):
    live, pool = gateway
    tid, _ = _episode(live, training=training)
    completions = pool.trajectory(tid).completions
    for c in completions:
        assert c.sampling.top_p == 0.5 and c.sampling.training is False and c.sampling.asked == ASK
        assert all(m < 0.5 + NUCLEUS_SLACK for m in _mass_before(trainer_model, c, 0.8))  # inside the nucleus
    batch = pool.take_batch(4, trainer_version=0, window=None)
    with pytest.raises(ForgeError, match=f"trajectory {tid}'s completion 0 .* ad-hoc session .*top_p = 0.5"):
        build_samples(batch, {c.id: 1.0 for c in completions})


def test_a_keys_own_session_is_ad_hoc(engine, tmp_path, trainer_model):
    """A loopback session that a key opened by itself is ad hoc too."""
    pool = DataPool.sqlite(tmp_path / "pool.sqlite")
    live = LiveGateway(GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, auth="loopback"))
    try:
        live.openai("any-key").chat.completions.create(model="forge", messages=MESSAGES, top_p=0.5, max_tokens=4)
        [c] = pool.trajectory(live.state.sessions[live.state.by_key["any-key"]].trajectory_id).completions
        assert c.sampling.training is False and c.sampling.top_p == 0.5 and c.sampling.asked["top_p"] == 0.5
    finally:
        live.stop()
        pool.close()


def test_training_must_be_a_boolean(gateway):
    live, _ = gateway
    r = httpx.post(f"{live.url}/admin/sessions", json={"training": "yes"}, headers=ADMIN, timeout=30)
    assert r.status_code == 400 and "training" in r.json()["error"]["message"]
    assert live.state.sessions == {}


def test_in_process_sessions_open_for_training_or_ad_hoc(tmp_path, tiny_model):
    """``Gateway.open_session(SessionRequest(training=True))``: what a driver or ``forge train`` calls, on a composed gateway."""
    from forge_cli.config import load_config
    from forge_cli.gateway.server import serve_gateway

    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"turns": ["hello"]}))
    config = load_config(env={}, overrides={"model.path": str(tiny_model), "model.engine.type": "scripted",
                                            "model.engine.policy": str(policy), "gateway.port": 0,
                                            "run.dir": str(tmp_path / "runs")})

    async def main():
        async with serve_gateway(config, "r") as gw:
            seen = {}
            for training in (True, False):
                info = await gw.open_session(SessionRequest(task_id="t", training=training))
                async with httpx.AsyncClient(base_url=info.base_url, timeout=60) as client:
                    r = await client.post("/chat/completions", json={"messages": MESSAGES, "top_p": 0.5},
                                          headers={"Authorization": f"Bearer {info.api_key}"})
                    assert r.status_code == 200, r.text
                [c] = gw.pool.trajectory(info.trajectory_id).completions
                seen[training] = (c.sampling.training, c.sampling.top_p, c.sampling.asked)
            return seen

    seen = asyncio.run(main())
    assert seen == {True: (True, 1.0, {"top_p": 0.5}), False: (False, 0.5, {"top_p": 0.5})}

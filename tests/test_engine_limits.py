"""One context limit with one meaning on every engine, and weight paths that cannot be read are the
caller's mistake (ForgeError), never an engine failure."""

from __future__ import annotations

import asyncio

import pytest

from forge_cli.engine.base import SamplingParams, context_limit
from forge_cli.errors import ForgeError
from tests.waiting import until


def make(kind: str, model, **kw):
    if kind == "hf":
        from forge_cli.engine.hf import HFEngine

        return HFEngine(model, **kw)
    from forge_cli.engine.scripted import ScriptedEngine

    return ScriptedEngine(model, lambda context: "ok", **kw)


def test_context_limit():
    assert context_limit(None, 8192) == 8192 and context_limit(None, None) == 4096
    assert context_limit(100, 8192) == 100 and context_limit(9000, None) == 9000
    with pytest.raises(ForgeError, match="beyond this model's 8192"):
        context_limit(8193, 8192)
    with pytest.raises(ForgeError, match=">= 2"):
        context_limit(1, 8192)


@pytest.mark.parametrize("kind", ["hf", "scripted"])
def test_max_model_len_is_the_limit_of_every_engine(tiny_model, kind):
    """prompt + max_tokens is checked against max_model_len: a prompt that fills it is refused and
    max_tokens is clamped to what is left; without one, the model's max_position_embeddings."""
    from transformers import AutoConfig

    positions = AutoConfig.from_pretrained(tiny_model).max_position_embeddings

    async def run():
        engine = make(kind, tiny_model, max_model_len=64)
        with pytest.raises(ForgeError, match="context is 64 tokens"):
            engine.check([5] * 64, SamplingParams(max_tokens=1))
        assert engine.check([5] * 60, SamplingParams(max_tokens=100)).max_tokens == 4
        [out] = await engine.generate([5] * 60, SamplingParams(max_tokens=100, temperature=0))
        assert len(out.output_ids) <= 4
        await engine.close()
        default = make(kind, tiny_model)
        assert default.max_model_len == positions
        await default.close()

    asyncio.run(run())
    with pytest.raises(ForgeError, match="max_model_len"):
        make(kind, tiny_model, max_model_len=positions + 1)


@pytest.mark.parametrize("kind", ["hf", "scripted"])
def test_unreadable_weight_paths_are_forge_errors(tiny_model, kind, tmp_path):
    """A 10,000-character path (File name too long), a file, a folder of broken safetensors: each a
    ForgeError, with the engine's version unchanged and the engine serving as before."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model.safetensors").write_bytes(b"not safetensors at all")

    async def run():
        engine = make(kind, tiny_model)
        for path in ["x" * 10_000, str(tmp_path) + "/a" * 3000, str(tmp_path / "file"), str(tmp_path / "broken")]:
            with pytest.raises(ForgeError, match="weights"):
                await engine.load_weights(path)
        assert engine.version == 0 and not engine.paused
        [out] = await engine.generate([5, 6, 7], SamplingParams(max_tokens=2, temperature=0))
        await engine.close()
        return out

    assert asyncio.run(run()).output_ids


def test_busy_seconds_count_the_time_a_request_is_in_flight(tiny_model, monkeypatch):
    """The engine-idle fraction's clock: it runs while at least one request is in flight (overlapping
    requests count once) and stands still while none is. The engine's clock is a stand-in the test moves."""
    from types import SimpleNamespace

    from forge_cli.engine import base

    now = [1000.0]
    monkeypatch.setattr(base, "time", SimpleNamespace(monotonic=lambda: now[0]))

    async def run():
        engine = make("scripted", tiny_model)
        assert engine.busy_seconds() == 0.0
        release = asyncio.Event()
        original = engine._generate
        entered: list[int] = []

        async def slow(*args, **kwargs):
            entered.append(1)
            await release.wait()
            return await original(*args, **kwargs)

        engine._generate = slow
        params = SamplingParams(max_tokens=2, temperature=0)
        calls = [asyncio.ensure_future(engine.generate([5, 6, 7], params)) for _ in range(3)]
        await until(lambda: len(entered) == 3, what="the three requests in flight")
        now[0] += 0.3
        assert engine.busy_seconds() == pytest.approx(0.3)  # running, counted once
        release.set()
        await asyncio.gather(*calls)
        busy = engine.busy_seconds()
        assert busy == pytest.approx(0.3)
        now[0] += 0.2
        assert engine.busy_seconds() == busy  # idle: the clock stands
        await engine.close()

    asyncio.run(run())

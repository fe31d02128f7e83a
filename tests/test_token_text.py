"""Logprob entries: a token's own bytes (also for pieces of a UTF-8 character) and JSON-safe values."""

from __future__ import annotations

import json
import math

import pytest

from forge_cli.gateway.token_text import LOGPROB_FLOOR, json_logprob, token_bytes


@pytest.fixture(scope="module")
def tok(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def test_the_bytes_of_every_token_of_a_text_add_up_to_its_utf8(tok):
    text = "naïve café — 日本語 🙂 tabs\tand newlines\n"
    ids = tok.encode(text, add_special_tokens=False)
    pieces = [tok.decode([i], skip_special_tokens=False) for i in ids]
    assert any("\ufffd" in p for p in pieces)  # some tokens hold part of a character
    assert b"".join(token_bytes(tok, i, p) for i, p in zip(ids, pieces)) == text.encode()


def test_logprobs_are_json_safe():
    assert json_logprob(-1.5) == -1.5
    assert json_logprob(-math.inf) == LOGPROB_FLOOR and json_logprob(math.nan) == LOGPROB_FLOOR
    json.dumps([json_logprob(-math.inf)], allow_nan=False)


def test_masked_ids_in_top_logprobs_do_not_break_the_response(tok):
    """vLLM reports -inf for ids outside the top-p nucleus: the gateway answers 200 with the floor
    (chat and legacy completions), and ids that decode alike keep the likeliest value."""
    import httpx

    from forge_cli.engine.base import Engine, GenerationOutput
    from forge_cli.gateway.state import GatewayState
    from tests.conftest import LiveGateway, tool_formats

    byte_ids = [i for i in range(300) if "\ufffd" in tok.decode([i])][:2]  # both decode to U+FFFD
    word = tok.encode("hi", add_special_tokens=False)[0]

    class Masked(Engine):  # the engine seam: what vLLM returns under top_p < 1
        async def _generate(self, prompt_ids, params, context):
            top = [[(word, -0.5), (byte_ids[0], -2.0), (byte_ids[1], -float("inf"))]]
            return [GenerationOutput([word, tok.eos_token_id], [-0.5, -float("inf")], "stop", self.version,
                                     top_logprobs=top + [[(tok.eos_token_id, -float("inf"))]])]

        async def _load_weights(self, weights):
            pass

    live = LiveGateway(GatewayState(Masked(4096), tok, tool_formats()))
    try:
        chat = httpx.post(f"{live.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}],
                                                                  "logprobs": True, "top_logprobs": 3}, headers={"Authorization": "Bearer t"})
        legacy = httpx.post(f"{live.url}/v1/completions", json={"prompt": "x", "logprobs": 3}, headers={"Authorization": "Bearer t"})
    finally:
        live.stop()
    assert chat.status_code == 200, chat.text
    first = chat.json()["choices"][0]["logprobs"]["content"][0]
    assert [t["logprob"] for t in first["top_logprobs"]] == [-0.5, -2.0, LOGPROB_FLOOR]
    assert [t["bytes"] for t in first["top_logprobs"][1:]] == [[b] for b in (token_bytes(tok, i, "\ufffd")[0] for i in byte_ids)]
    assert legacy.status_code == 200, legacy.text
    assert legacy.json()["choices"][0]["logprobs"]["top_logprobs"][0] == {"hi": -0.5, "\ufffd": -2.0}

"""Streaming content while generation runs: never a tool call shown as text, and the pieces add up
to exactly the non-streamed content, for every format, whatever the chunking."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_cli.builtin.tool_formats import TEXT_FORMATS
from forge_cli.gateway.render import Tool, parse_output
from forge_cli.gateway.streaming import ContentStream
from forge_cli.specs import ToolCall

FORMATS = [cls() for cls in TEXT_FORMATS]
TOOLS = [Tool("bash"), Tool("read_file")]


@pytest.fixture(scope="module")
def tok(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


prose = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(before=prose, with_call=st.booleans(), cuts=st.lists(st.integers(1, 7), min_size=1, max_size=30), data=st.data())
def test_pieces_add_up_and_hide_calls(tok, fmt, before, with_call, cuts, data):
    call = ToolCall("bash", {"command": data.draw(st.text(max_size=15))})
    text = before + ("\n" + fmt.format_calls([call]) if with_call else "")
    ids = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    stream = ContentStream(tok, fmt)
    sent, pos, i = "", 0, 0
    while pos < len(ids):
        step = cuts[i % len(cuts)]
        piece = stream.feed(ids[pos : pos + step])
        pos, i = pos + step, i + 1
        sent += piece
    final = parse_output(tok, ids, tok.eos_token_id, fmt, TOOLS)
    assert sent + stream.rest(final.content) == final.content
    if final.calls:
        for mark in fmt.markers:
            assert mark not in sent


def test_no_tools_streams_text_as_is_and_holds_back_a_partial_stop(tok):
    text = "Hello there. STOP after"
    ids = tok.encode(text, add_special_tokens=False)
    stream = ContentStream(tok, None, stops=("STOP",))
    sent = "".join(stream.feed([t]) for t in ids)
    assert "STOP" not in sent and sent.startswith("Hello there.")

"""vLLM's parsers as Forge tool formats, ``native`` rendering, and the prompt-history record, on the
embedded tiny model (whose template takes tools in the Hermes style). The real families' tokenizers
and templates: tests/test_native_families.py."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_cli.engine.scripted import ScriptedEngine
from forge_cli.errors import ForgeError
from forge_cli.gateway.render import Tool, Turn, render_prompt, template_messages
from forge_cli.gateway.state import GatewayState
from forge_cli.pool.store import DataPool
from forge_cli.specs import ToolCall
from forge_cli.toolformats.json_formats import HermesFormat
from forge_cli.toolformats.native import ModelFormats, NativeFormat, template_takes_tools
from forge_cli.toolformats.vllm_parsers import REASONING_PARSERS, TOOL_PARSERS, VLLMToolFormat
from tests.conftest import LiveGateway, tool_formats

LS = Tool("ls", "list a folder", {"type": "object", "properties": {"path": {"type": "string"}, "all": {"type": "boolean"}}})


@pytest.fixture(scope="module")
def tok(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.mark.slow
def test_the_registered_names_are_the_installed_vllms():
    """Forge lists vLLM's parsers without importing vLLM; this holds the lists to vLLM's registries."""
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    assert sorted(TOOL_PARSERS) == sorted(ToolParserManager.list_registered())
    assert sorted(REASONING_PARSERS) == sorted(ReasoningParserManager.list_registered())
    assert len(TOOL_PARSERS) >= 54 and len(REASONING_PARSERS) >= 38


names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
values = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=12),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                      max_leaves=6)
calls = st.lists(st.builds(ToolCall, name=names, arguments=st.dictionaries(names, values, max_size=4)), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None)
@given(made=calls, prose=st.sampled_from(["", "Let me look.", "Sure:\n"]))
def test_forges_hermes_reads_what_vllms_hermes_reads(tok, made, prose):
    """Forge keeps its own hermes (FORGE_KEEPS): it must give the calls vLLM's would, on the same text."""
    vllm_hermes = VLLMToolFormat("hermes").bind(tok)
    text = (prose + "\n" if prose else "") + HermesFormat().format_calls(made)
    ours, theirs = HermesFormat().parse(text), vllm_hermes.parse(text)
    assert [(c.name, c.arguments) for c in ours.calls] == [(c.name, c.arguments) for c in theirs.calls] == [
        (c.name, c.arguments) for c in made]
    assert ours.content == theirs.content == prose.strip()


def test_a_call_vllm_drops_silently_is_a_parse_error(tok):
    fmt = VLLMToolFormat("qwen3_json").bind(tok)
    good = fmt.parse('Looking.\n<tool_call>\n{"name": "ls", "arguments": {"path": "/"}}\n</tool_call>', [LS.schema()])
    assert [(c.name, c.arguments) for c in good.calls] == [("ls", {"path": "/"})] and good.errors == [] and good.content == "Looking."
    bad = fmt.parse('Looking.\n<tool_call>\n{"name": "ls", "arguments": {"path": }\n</tool_call>', [LS.schema()])
    assert bad.calls == [] and bad.content == "Looking."
    assert len(bad.errors) == 1 and "0 parsed by vLLM's 'qwen3_json' parser" in bad.errors[0].reason
    assert bad.errors[0].text.startswith("<tool_call>")


def test_a_parser_that_does_not_fit_the_tokenizer_is_a_clear_error(tok):
    with pytest.raises(ForgeError, match="tool format 'llama3_json': vLLM's parser does not fit this model's tokenizer"):
        VLLMToolFormat("llama3_json").bind(tok)
    with pytest.raises(ForgeError, match="bind it to the model's tokenizer first"):
        VLLMToolFormat("hermes").parse("x")


def test_model_formats_defaults_and_errors(tok):
    formats = tool_formats()
    assert template_takes_tools(tok)
    forge = ModelFormats(tok, formats, model_type="forge")  # the embedded model: Forge's hermes text
    assert forge.default == "hermes" and forge.get().rendering == "text" and forge.reasoning() is None
    native = ModelFormats(tok, formats, model_type="forge", tool_format="native")
    bound = native.get()
    assert isinstance(bound, NativeFormat) and bound.rendering == "template" and bound.parser.name == "hermes"
    assert bound.markers == ("<tool_call>",)
    qwen = ModelFormats(tok, formats, model_type="qwen3_moe", reasoning_parser="none")  # a family Forge knows: native
    assert qwen.default == "native" and qwen.get().parser.name == "hermes"
    with pytest.raises(ForgeError, match="Forge cannot tell which parser reads its calls.*set model.tool_parser"):
        ModelFormats(tok, formats, model_type="somebrandnew")
    chosen = ModelFormats(tok, formats, model_type="somebrandnew", tool_parser="qwen3_json")
    assert chosen.default == "native" and chosen.get().parser.name == "qwen3_json"
    with pytest.raises(ForgeError, match="model.tool_format: no tool format named 'nope'"):
        ModelFormats(tok, formats, model_type="forge", tool_format="nope")
    with pytest.raises(ForgeError, match="model.reasoning_parser: no reasoning parser named 'nope'"):
        ModelFormats(tok, formats, {}, model_type="forge", reasoning_parser="nope")


def test_native_rendering_is_the_templates_own(tok):
    """The prompt is exactly ``apply_chat_template(messages, tools=…)`` with structured calls and
    tool results: the plain computation, not Forge's text."""
    call = ToolCall("ls", {"path": "/tmp", "all": True}, id="call_1")
    turns = [Turn("system", "Be brief."), Turn("user", "What is in /tmp?"), Turn("assistant", "", [call]),
             Turn("tool", "a.txt", name="ls", tool_call_id="call_1")]
    native = render_prompt(tok, turns, [LS], NativeFormat(HermesFormat()))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is in /tmp?"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
                                                                      "function": {"name": "ls", "arguments": {"path": "/tmp", "all": True}}}]},
                {"role": "tool", "content": "a.txt", "tool_call_id": "call_1", "name": "ls"}]
    expected = tok.apply_chat_template(messages, tools=[LS.schema()], tokenize=False, add_generation_prompt=True)
    assert native.text == expected and native.prompt_ids == tok.encode(expected, add_special_tokens=False)
    assert '"arguments": {"path": "/tmp", "all": true}' in native.text  # the template wrote the structured call
    forced, _ = template_messages(turns, [LS], forced_tool="ls")
    assert forced[0]["content"] == "Be brief.\n\nYou must call the tool ls."


class Replies:
    def __init__(self) -> None:
        self.queue: list[str] = []

    def __call__(self, context):
        return self.queue.pop(0) if self.queue else "ok"


@pytest.fixture(scope="module")
def live(tiny_model, tmp_path_factory):
    replies = Replies()
    engine = ScriptedEngine(tiny_model, replies)
    pool = DataPool.sqlite(tmp_path_factory.mktemp("native") / "pool.sqlite")
    state = GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, admin_key="admin", default_tool_format="native",
                         model_type="forge")
    gateway = LiveGateway(state)
    yield gateway, replies, pool
    gateway.stop()
    pool.close()


def _completions(live, key):
    gateway, _, pool = live
    state = gateway.state
    return pool.trajectory(state.sessions[state.by_key[key]].trajectory_id).completions


def test_native_through_the_gateway_records_calls_history_and_failed_parses(live):
    gateway, replies, _ = live
    client = gateway.openai("k-native")
    replies.queue.append('<tool_call>\n{"name": "ls", "arguments": {"path": "/tmp"}}\n</tool_call>')
    first = client.chat.completions.create(model="forge", messages=[{"role": "user", "content": "list /tmp"}], tools=[LS.schema()])
    [call] = first.choices[0].message.tool_calls
    assert call.function.name == "ls" and json.loads(call.function.arguments) == {"path": "/tmp"}
    replies.queue.append('<tool_call>\n{"name": "ls", "arguments": {"path": }\n</tool_call>')
    history = [{"role": "user", "content": "list /tmp"},
               {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
               {"role": "tool", "tool_call_id": call.id, "content": "a.txt"}]
    second = client.chat.completions.create(model="forge", messages=history, tools=[LS.schema()])
    assert second.choices[0].message.tool_calls is None
    one, two = _completions(live, "k-native")
    assert one.tool_format == two.tool_format == "native"
    assert one.tool_calls == [{"name": "ls", "arguments": {"path": "/tmp"}}] and two.tool_calls == []
    assert one.history.kind == "first" and two.history.kind in ("exact", "reused") and two.history.family == "forge"
    assert two.prompt_ids[: len(one.prompt_ids) + len(one.output_ids)] == one.prompt_ids + one.output_ids
    assert len(two.parse_errors) == 1 and "not valid JSON" in two.parse_errors[0]["reason"]
    metrics = httpx.get(f"{gateway.url}/metrics").text
    assert 'forge_gateway_tool_parse_errors_total{tool_format="native:hermes"} 1.0' in metrics


def test_an_edited_history_is_recorded_as_drift_where_it_diverged(live):
    gateway, replies, _ = live
    client = gateway.openai("k-drift")
    replies.queue.append("The answer is 4.")
    client.chat.completions.create(model="forge", messages=[{"role": "user", "content": "2+2?"}])
    # the agent sends its answer back changed: the prompt can no longer begin with what was sampled
    client.chat.completions.create(model="forge", messages=[{"role": "user", "content": "2+2?"},
                                                            {"role": "assistant", "content": "It is four."},
                                                            {"role": "user", "content": "sure?"}])
    one, two = _completions(live, "k-drift")
    assert two.history.kind == "drifted"
    at = two.history.at
    assert two.prompt_ids[:at] == (one.prompt_ids + one.output_ids)[:at]
    assert two.prompt_ids[at] != (one.prompt_ids + one.output_ids)[at]
    metrics = httpx.get(f"{gateway.url}/metrics").text
    assert 'forge_gateway_prompt_history_total{family="forge",kind="drifted",scaffold="external",tool_format="native"} 1.0' in metrics


def test_pool_stats_report_drift_per_scaffold_format_and_family(live):
    gateway, replies, pool = live
    client = gateway.openai("k-stats")
    client.chat.completions.create(model="forge", messages=[{"role": "user", "content": "hi"}])
    client.chat.completions.create(model="forge", messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "edited"},
                                                            {"role": "user", "content": "and?"}])
    rows = {(r["scaffold"], r["tool_format"], r["family"]): r for r in pool.stats()["prompt_history"]}
    row = rows[("external", "native", "forge")]
    recorded = [c.history.kind for t in pool.groups() for tr in t.trajectories for c in tr.completions]
    assert {k: row[k] for k in ("first", "exact", "reused", "drifted")} == {k: recorded.count(k) for k in ("first", "exact", "reused", "drifted")}
    assert row["drifted"] >= 1 and row["drift_rate"] == round(row["drifted"] / (row["exact"] + row["reused"] + row["drifted"]), 4)


# GLM-4.5/4.7, Kimi K2 and MiniMax-M2 have no vocabulary offline: their parsers on a stand-in
# tokenizer (the tiny model's) with the families' marker tokens added, reading each family's syntax.
STAND_IN = {
    "glm45": ("<tool_call>ls\n<arg_key>path</arg_key>\n<arg_value>/tmp</arg_value>\n<arg_key>all</arg_key>\n"
              "<arg_value>true</arg_value>\n</tool_call>",
              ["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]),
    "glm47": ("<tool_call>ls<arg_key>path</arg_key><arg_value>/tmp</arg_value><arg_key>all</arg_key>"
              "<arg_value>true</arg_value></tool_call>",
              ["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]),
    "kimi_k2": ("<|tool_calls_section_begin|><|tool_call_begin|>functions.ls:0<|tool_call_argument_begin|>"
                '{"path": "/tmp", "all": true}<|tool_call_end|><|tool_calls_section_end|>',
                ["<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_end|>",
                 "<|tool_call_argument_begin|>"]),
    "minimax_m2": ('<minimax:tool_call>\n<invoke name="ls">\n<parameter name="path">/tmp</parameter>\n'
                   '<parameter name="all">true</parameter>\n</invoke>\n</minimax:tool_call>',
                   ["<minimax:tool_call>", "</minimax:tool_call>"]),
}


@pytest.mark.parametrize("name", sorted(STAND_IN))
def test_families_without_an_offline_vocabulary_parse_on_a_stand_in(tiny_model, name):
    from transformers import AutoTokenizer

    text, markers = STAND_IN[name]
    tok = AutoTokenizer.from_pretrained(tiny_model)
    tok.add_special_tokens({"additional_special_tokens": markers})
    fmt = VLLMToolFormat(name).bind(tok)
    parsed = fmt.parse("Let me look.\n" + text, [LS.schema()])
    assert [(c.name, c.arguments) for c in parsed.calls] == [("ls", {"path": "/tmp", "all": True})], parsed
    assert parsed.content == "Let me look." and parsed.errors == []
    assert fmt.markers and text.startswith(fmt.markers[0])  # streaming holds content back from here
    # cut mid-call (max_tokens): vLLM returns the call with the arguments it got; here it is an error
    broken = fmt.parse("Let me look.\n" + text[: len(text) // 2], [LS.schema()])
    assert broken.calls == [] and len(broken.errors) == 1 and "not closed" in broken.errors[0].reason

"""Every registered tool-call format: render → text → parse gives the calls back; parse never raises.

The properties run over the registry as Forge loads it — built-ins, installed plugins, and the
example plugin's ``sexpr`` format loaded as a third party — not over a list kept in this file,
so a format that a plugin registers is checked like Forge's own (docs/plugins.md promises it).
"""

from __future__ import annotations

import importlib
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_cli import plugins
from forge_cli.builtin.tool_formats import HermesFormat
from forge_cli.specs import ToolCall
from tests.conftest import EXAMPLE_PLUGIN


def _registry() -> plugins.Registry:
    """What Forge registers, plus the example plugin loaded the way a third party is."""
    sys.path.insert(0, str(EXAMPLE_PLUGIN))
    try:
        example = importlib.import_module("forge_scaffold_example")
    finally:
        sys.path.remove(str(EXAMPLE_PLUGIN))
    pm, registry = plugins.load_plugins(extra=[("forge-scaffold-example", example)])
    return plugins.collect(pm, registry)


REGISTRY = _registry()
# the formats that write their own text (vLLM's parsers and native render with a model's template
# and parse with its tokenizer: tests/test_vllm_parsers.py)
FORMATS = [entry.value for entry in REGISTRY.tool_formats.values() if entry.value.rendering == "text"]

# One call written by hand in each format's documented syntax (what the model emits).
CALL = ToolCall("ls", {"path": "/tmp", "all": True})
WRITTEN = {
    "hermes": '<tool_call>\n{"name": "ls", "arguments": {"path": "/tmp", "all": true}}\n</tool_call>',
    "hermes-unlisted": '<tool_call>\n{"name": "ls", "arguments": {"path": "/tmp", "all": true}}\n</tool_call>',
    "react": 'Action: ls\nAction Input: {"path": "/tmp", "all": true}',
    "json-block": '```json\n{"name": "ls", "arguments": {"path": "/tmp", "all": true}}\n```',
    "xml-tags": "<ls>\n<path>/tmp</path>\n<all>true</all>\n</ls>",
    "sexpr": '(call ls {"path": "/tmp", "all": true})',
}

json_leaf = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30)
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)
# argument names are schema property names: identifiers
keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
object_args = st.dictionaries(keys, json_value, max_size=5)
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)


def calls_for(fmt):
    arguments = object_args | st.text(max_size=40) if fmt.freeform_arguments else object_args
    return st.lists(st.builds(ToolCall, name=names, arguments=arguments), min_size=1, max_size=4)


def _plain(call: ToolCall) -> tuple:
    return call.name, call.arguments


def test_each_known_format_is_registered_and_reads_its_own_syntax():
    """Forge's built-ins come from its own plugin, the example's from the third party; each
    format under its name parses a call written in that model family's syntax."""
    assert {name for name, e in REGISTRY.tool_formats.items() if e.plugin == "forge:tool-formats"} == set(WRITTEN) - {"sexpr"} | {"native", "harmony"}
    assert REGISTRY.tool_formats["sexpr"].plugin == "forge-scaffold-example"
    for name, text in WRITTEN.items():
        parsed = REGISTRY.tool_format(name).parse(text)
        assert [_plain(c) for c in parsed.calls] == [_plain(CALL)], name
        assert parsed.errors == [] and parsed.content == "", name


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), prose=st.text(max_size=60))
def test_round_trip(fmt, data, prose):
    made = data.draw(calls_for(fmt))
    text = fmt.format_calls(made)
    parsed = fmt.parse(text)
    assert [_plain(c) for c in parsed.calls] == [_plain(c) for c in made]
    assert parsed.errors == [] and parsed.content == ""
    # with prose before the calls (prose that itself contains no call)
    quiet = fmt.parse(prose)
    if not quiet.calls and not quiet.errors:
        mixed = fmt.parse(prose + "\n" + text)
        assert [_plain(c) for c in mixed.calls] == [_plain(c) for c in made]
        assert mixed.content == prose.strip()


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@settings(max_examples=300)
@given(text=st.text(max_size=200) | st.lists(st.sampled_from([
    "<tool_call>", "</tool_call>", "(call f ", "{", "}", '"', ")", "x", "\n", '{"name": "f"', "<function=f>", "<parameter=a>",
    "</parameter>", "</function>", '<invoke name="f">', "</invoke>", "[TOOL_CALLS]", "Action: f\nAction Input: ", "```json\n",
    "```", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<arg_key>", "<arg_value>", "<f>", "</f>", "<a>", "</a>",
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>",
])).map("".join))
def test_parse_never_raises(fmt, text):
    parsed = fmt.parse(text)
    assert isinstance(parsed.content, str)


def test_hermes_bad_call_is_a_parse_error_not_a_crash():
    parsed = HermesFormat().parse('Let me look.\n<tool_call>\n{"name": "ls", "arguments": {"path": }\n</tool_call>')
    assert parsed.calls == [] and parsed.content == "Let me look."
    assert len(parsed.errors) == 1 and "not valid JSON" in parsed.errors[0].reason
    missing_name = HermesFormat().parse('<tool_call>{"arguments": {}}</tool_call>')
    assert "missing string field 'name'" in missing_name.errors[0].reason


def test_hermes_unterminated_call_at_end_of_generation_still_parses():
    parsed = HermesFormat().parse('<tool_call>\n{"name": "ls", "arguments": {"path": "/"}}')
    assert [_plain(c) for c in parsed.calls] == [("ls", {"path": "/"})]


def test_hermes_render_lists_tools():
    tool = {"type": "function", "function": {"name": "bash", "description": "run", "parameters": {"type": "object"}}}
    text = HermesFormat().render_tools([tool])
    assert '"name": "bash"' in text and "<tools>" in text and "<tool_call>" in text


def test_hermes_unlisted_renders_no_tools_into_the_prompt_and_reads_hermes_calls(tiny_model):
    """The embedded default's format: the request's tools stay out of the prompt (the scaffold's
    system message is all there is) while calls parse as Hermes' do."""
    from transformers import AutoTokenizer

    from forge_cli.builtin.tool_formats import HermesUnlistedFormat
    from forge_cli.gateway.render import Tool, Turn, render_prompt

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tools = [Tool("calc", "e.g. 12 * 34")]
    turns = [Turn(role="system", content="Be brief."), Turn(role="user", content="What is 2+2?")]
    listed = render_prompt(tokenizer, turns, tools, HermesFormat()).text
    unlisted = render_prompt(tokenizer, turns, tools, HermesUnlistedFormat()).text
    assert "<tools>" in listed and '"name": "calc"' in listed
    assert unlisted == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    text = HermesFormat().format_calls([ToolCall("calc", {"expression": "2+2"})])
    assert HermesUnlistedFormat().parse(text) == HermesFormat().parse(text)

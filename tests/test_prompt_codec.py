"""The gateway's chunked prompt codec (forge_cli/gateway/prompt_codec.py) gives exactly the ids of
encoding the whole text, on random conversations, and exactly the text of decoding the whole id list, on
random ids, for every real family tokenizer the tests build, the embedded model's, and a
SentencePiece-style one that prepends a space to the first word only; chunks a call encoded before are
not encoded again; a token the tokenizer's own match could pass over is never a cut."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_cli.gateway.prompt_codec import PromptCodec, prompt_codec, splitters

FAMILY_NAMES = ("qwen3", "qwen3_5", "llama3_1", "deepseek_v3", "gpt_oss")
# text that tokenizers treat specially: spaces and line ends, a combining accent (NFC joins it to the letter
# before), CJK, an emoji (4 UTF-8 bytes), digits, contractions, and pieces of turn markers
ATOMS = [" ", "  ", "\n", "\n\n", "\r\n", "\t", "a", "hello", " world", "e", "\u0301", "é", "中文", "🙂", "7", "2024",
         "'s", "'ll", "<", "|", ">", "<|", "|>", "<|im_", "im_end", "▁", "##", "  x", "\u00a0"]


def _sentencepiece_like():
    """A fast tokenizer whose pre-tokenizer prepends "▁" to the input's first word only (SentencePiece's
    ``prepend_scheme="first"``, as Llama 2 and Mistral's converted tokenizers), with turn markers."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    corpus = ["hello world this is a test of the tokenizer", "the quick brown fox jumps over the lazy dog 2024",
              "é中文🙂 'll 's <|im_ |> im_end"] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def _tokenizers():
    from forge_cli.engine.default_model import build_tokenizer

    out = {"embedded": build_tokenizer(4096), "sentencepiece-first": _sentencepiece_like()}
    from tests.families import family_tokenizer

    for name in FAMILY_NAMES:
        out[name] = family_tokenizer(name)
    return out


@pytest.fixture(scope="module")
def tokenizers():
    return _tokenizers()


def conversations(markers: list[str]):
    piece = st.one_of(st.sampled_from(ATOMS), st.sampled_from(markers), st.text(max_size=12))
    return st.lists(piece, max_size=80).map("".join)


@pytest.mark.parametrize("name", ["embedded", "sentencepiece-first", *FAMILY_NAMES])
def test_chunked_encoding_is_the_whole_texts_encoding(tokenizers, name):
    tok = tokenizers[name]
    cuts = splitters(tok)
    assert cuts, f"{name}: no turn marker qualifies as a cut: the test would test nothing"
    markers = list(cuts[:6]) + [m for m in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>",
                                            "<|begin_of_text|>", "<|eot_id|>", "[INST]", "[/INST]", "</s>") if m in cuts]

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=conversations(markers), chunk_chars=st.integers(1, 40))
    def check(text, chunk_chars):
        encoder = PromptCodec(tok, chunk_chars=chunk_chars)
        whole = tok.encode(text, add_special_tokens=False)
        assert encoder.encode(text) == whole
        assert encoder.encode(text) == whole  # the second time from remembered chunks

    check()


def test_a_decoder_that_is_not_byte_level_decodes_whole(tokenizers):
    """Without byte-level BPE's decoder (here: none, which joins tokens with spaces) the text of a cut is
    not the texts of its sides joined: such a tokenizer is never cut when decoding."""
    tok = tokenizers["sentencepiece-first"]
    codec = PromptCodec(tok, chunk_tokens=1)
    assert codec.pattern is not None and not codec.cut_ids
    ids = tok.encode("[INST] hello world [/INST] the fox </s>", add_special_tokens=False) * 3
    assert codec.decode(ids) == tok.decode(ids)


@pytest.mark.parametrize("name", ["embedded", *FAMILY_NAMES])
def test_chunked_decoding_is_the_whole_id_lists_decoding(tokenizers, name):
    """Any ids a model may sample: ordinary tokens, turn markers, single bytes that leave UTF-8 unfinished
    on either side of a cut."""
    tok = tokenizers[name]
    codec = PromptCodec(tok)
    assert codec.cut_ids
    markers = sorted(codec.cut_ids)[:8]
    ascii_ids = tok.encode("a b ( x", add_special_tokens=False)
    lone_bytes = [i for i in (tok.convert_tokens_to_ids(t) for t in ("\u00e4", "\u00a5", "\u0142", "\u0105")) if isinstance(i, int) and 0 <= i < len(tok)]
    pieces = st.one_of(st.integers(0, len(tok) - 1), st.sampled_from(markers), st.sampled_from(ascii_ids + lone_bytes or ascii_ids))

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(ids=st.lists(pieces, max_size=120), chunk_tokens=st.integers(1, 12))
    def check(ids, chunk_tokens):
        codec = PromptCodec(tok, chunk_tokens=chunk_tokens)
        whole = tok.decode(ids)
        assert codec.decode(ids) == whole
        assert codec.decode(ids) == whole  # the second time from remembered chunks

    check()


def test_a_growing_conversation_encodes_only_its_new_chunks(tokenizers):
    """As an agent's calls come: the same long system prompt, a turn more each time."""
    tok = tokenizers["qwen3"]
    encoder = PromptCodec(tok, chunk_chars=256)
    system = " ".join(f"tool number {i} reads files and writes them back" for i in range(300))
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Fix the failing test."}]
    for turn in range(6):
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        misses, hits = encoder.misses, encoder.hits
        assert encoder.encode(text) == tok.encode(text, add_special_tokens=False)
        if turn:  # the system prompt's chunk, and every other one the new turns do not reach, was remembered
            assert encoder.misses - misses <= 2 and encoder.hits - hits == len(encoder.chunks(text)) - (encoder.misses - misses) >= 1
        messages += [{"role": "assistant", "content": f"I looked at file {turn}."},
                     {"role": "user", "content": f"Result {turn}: " + "ok " * 100}]


def test_a_token_another_added_token_can_overlap_is_not_a_cut():
    """``x<a`` ends with a beginning of ``<a>``: in ``x<a>`` the tokenizer's leftmost match is ``x<a``, so a
    cut before ``<a>`` would be wrong there; one with lstrip takes the spaces before it; neither is a cut,
    and the encoding stays the whole text's."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.train_from_iterator(["a b c x y z < > hello"] * 10, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>"],
                                                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    raw.add_special_tokens([AddedToken("<a>", normalized=False), AddedToken("x<a", normalized=False),
                            AddedToken("<b>", normalized=False, lstrip=True), AddedToken("<c>", normalized=False)])
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>")
    assert set(splitters(tok)) == {"<unk>", "x<a", "<c>"}  # not <a> (x<a may cover it), not <b> (lstrip)
    text = "hello x<a> then  <b> and <c>" * 5
    encoder = PromptCodec(tok, chunk_chars=1)
    assert encoder.encode(text) == tok.encode(text, add_special_tokens=False)


def test_a_slow_tokenizer_is_encoded_whole():
    class Slow:
        is_fast = False

        def encode(self, text, add_special_tokens=False):
            return [len(text)]

    assert splitters(Slow()) == ()
    assert PromptCodec(Slow(), chunk_chars=1).encode("x" * 100) == [100]


def test_one_encoder_per_tokenizer(tokenizers):
    assert prompt_codec(tokenizers["qwen3"]) is prompt_codec(tokenizers["qwen3"])
    assert prompt_codec(tokenizers["qwen3"]) is not prompt_codec(tokenizers["llama3_1"])


def test_the_gateway_renders_long_prompts_through_the_codec(tokenizers):
    """render_prompt's ids for a long conversation are the tokenizer's, and came from the tokenizer's codec
    (its chunks remembered: the same conversation again encodes nothing new)."""
    from forge_cli.gateway.render import Turn, render_prompt
    from forge_cli.toolformats.json_formats import HermesFormat

    tok = tokenizers["qwen3"]
    turns = [Turn("system", "You are an agent. " * 2000), Turn("user", "Fix the failing test.")]
    fmt = HermesFormat()
    first = render_prompt(tok, turns, [], fmt)
    assert first.prompt_ids == tok.encode(first.text, add_special_tokens=False)
    codec = prompt_codec(tok)
    misses = codec.misses
    again = render_prompt(tok, turns + [Turn("assistant", "Looking."), Turn("user", "ok")], [], fmt)
    assert again.prompt_ids == tok.encode(again.text, add_special_tokens=False)
    assert codec.misses - misses <= 1 and codec.hits > 0


def test_a_tokenizer_whose_chunks_do_not_add_up_is_caught_on_its_first_long_text(tokenizers):
    """A tokenizer unlike the tested ones (here: one that numbers the calls made to it, so a chunk's ids
    depend on more than its text): the first long text is checked against the whole encoding and
    decoding, the cutting stops, and every answer is the whole call's."""
    real = tokenizers["qwen3"]

    class Counting:
        is_fast = True
        backend_tokenizer = real.backend_tokenizer
        clean_up_tokenization_spaces = False
        calls = 0

        def encode(self, text, add_special_tokens=False):
            self.calls += 1
            return real.encode(text, add_special_tokens=False) + [self.calls]

        def decode(self, ids):
            self.calls += 1
            return real.decode(ids) + str(self.calls)

    tok = Counting()
    codec = PromptCodec(tok, chunk_chars=16, chunk_tokens=4)
    text = "<|im_start|>system\n" + "tools and files " * 20 + "<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n" * 3
    first = codec.encode(text)
    assert codec.pattern is None and first[:-1] == real.encode(text, add_special_tokens=False)
    ids = real.encode(text, add_special_tokens=False)
    decoded = codec.decode(ids)
    assert not codec.cut_ids and decoded.startswith(real.decode(ids)) and decoded[len(real.decode(ids)):].isdigit()

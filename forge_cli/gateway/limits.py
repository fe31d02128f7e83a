"""Refusing a prompt that cannot fit the model's context before paying to tokenise it.

No token of a tokenizer stands for more than ``L`` bytes of text (``L``: the longest vocabulary
entry, as UTF-8, which is at least the bytes it decodes to in byte-level BPE and SentencePiece
vocabularies). So a text of ``B`` bytes is at least ``ceil(B / L)`` tokens, wherever the tokenizer
puts its boundaries — provided the tokenizer keeps every byte of the text (decoding gives the text
back). That is checked once per tokenizer on a probe of the text it could drop (runs of spaces,
tabs, newlines, accents, emoji); a tokenizer that normalises text away gets no bound, only the
exact count.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

_PROBE = "  a  b\t\tc\n\n\n d    e\r\nÉté  naïve 漢字 😀😀  \u00a0 x" + " " * 40 + "y"
_cache: weakref.WeakKeyDictionary[Any, int | None] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def max_token_bytes(tokenizer: Any) -> int | None:
    """``L``: the most bytes one token may stand for; ``None`` when no sound bound is known."""
    with _lock:
        try:
            if tokenizer in _cache:
                return _cache[tokenizer]
        except TypeError:  # not weak-referenceable: compute each time
            return _compute(tokenizer)
        value = _compute(tokenizer)
        _cache[tokenizer] = value
        return value


def _compute(tokenizer: Any) -> int | None:
    try:
        lossless = tokenizer.decode(tokenizer.encode(_PROBE, add_special_tokens=False), skip_special_tokens=False) == _PROBE
        vocab = tokenizer.get_vocab()
    except Exception:  # a tokenizer without these: no bound
        return None
    if not lossless or not vocab:
        return None
    return max(len(str(piece).encode("utf-8")) for piece in vocab)


def token_floor(tokenizer: Any, text: str) -> int:
    """A lower bound on ``len(tokenizer.encode(text))`` that costs no tokenising (0: none known)."""
    longest = max_token_bytes(tokenizer)
    if not longest:
        return 0
    return -(-utf8_len(text) // longest)

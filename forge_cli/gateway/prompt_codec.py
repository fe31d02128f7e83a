"""A rendered prompt's ids, encoded a chunk at a time, the chunks an earlier call encoded remembered;
and a session's ids decoded back to text the same way.

An agent sends its whole conversation on every call: a 30k-token system prompt and tool listing, then
the turns so far. Encoding all of it again cost a real Qwen3 tokenizer ~134 ms a call (RESULTS.md,
"Gateway overhead at an agent's prompt lengths"), while only the last turns are new.

Why the chunks' ids are the whole text's ids, exactly: a fast (``tokenizers``) tokenizer first cuts its
input at every added token that is matched on the raw text (not normalised), then normalises,
pre-tokenises and encodes each piece on its own; the only thing a piece knows of the others is whether
it is the input's first (``split_id == 0``: SentencePiece's "prepend a space to the first word"). So
the text is cut only right before an occurrence of such a token (a *splitter*: the chat template's turn
markers), every chunk after the first begins with that token, and its pieces are never first — as in
the whole text. A token is a splitter only when the cut is certain to be the tokenizer's own: not
normalised, no ``lstrip``/``rstrip``/``single_word`` (which move its edges), and no other added token
that contains it or ends with a beginning of it (which the tokenizer's leftmost-longest match could
prefer where this one occurs). Anything else — a slow tokenizer, none of its tokens qualifying, a
short text — is encoded whole. ``tests/test_prompt_codec.py`` holds the result equal to
``tokenizer.encode`` on random conversations for every family tokenizer the tests build; for any other
tokenizer, the first long text is also encoded whole, and a difference turns the cutting off for good.

Decoding (the session's history keeps each call's prompt and output as text, to match the next
prompt against; a 30k-token decode cost ~15 ms) is cut the same way, before a splitter's id, where
the decoder is byte-level BPE's (each token's bytes, joined: Qwen, Llama 3, DeepSeek, gpt-oss, the
embedded model) and no clean-up of spaces follows (``clean_up_tokenization_spaces``, whose patterns
look at neighbours); any other decoder (one that joins tokens with spaces, SentencePiece's, which
strips the first space) decodes whole. ``tokenizer.decode`` on random ids is the test.
"""

from __future__ import annotations

import re
import threading
import weakref
from array import array
from collections import OrderedDict
from typing import Any, Callable

CHUNK_CHARS = 4096  # a chunk ends at the first splitter at least this far from its start
CACHE_TOKENS = 4_000_000  # the chunks remembered, by their tokens, least recently used forgotten first (4 bytes each)


def splitters(tokenizer: Any) -> tuple[str, ...]:
    """The added tokens of ``tokenizer`` at whose every occurrence its own encoding cuts the raw text,
    longest first; empty when it is not a fast tokenizer (see the module's docstring)."""
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is None:
        return ()
    added = list(backend.get_added_tokens_decoder().values())
    contents = [t.content for t in added if t.content]
    joined = "\0".join(contents)  # an added token occurs in it more than once: another token contains it
    ends = {c[i:] for c in contents for i in range(1, len(c))}  # every added token's ends (conservatively, its own too)
    chosen = []
    for token in added:
        s = token.content
        if not s or token.normalized or token.lstrip or token.rstrip or token.single_word:
            continue
        if joined.count(s) > 1 or any(s[:k] in ends for k in range(1, len(s))):
            continue
        chosen.append(s)
    return tuple(sorted(chosen, key=len, reverse=True))


class Remembered:
    """A thread-safe least-recently-used map of chunks to what they became, bounded by the tokens held
    (``size(key, value)``); ``hits`` and ``misses`` counted."""

    def __init__(self, limit: int, size: Callable[[Any, Any], int]) -> None:
        self.limit, self.size = limit, size
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: Any, make: Callable[[Any], Any]) -> Any:
        """The value remembered for ``key``, else ``make(key)``, remembered (made outside the lock)."""
        with self._lock:
            known = self._items.get(key)
            if known is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return known
        value = make(key)
        with self._lock:
            self.misses += 1
            if key not in self._items:
                self._items[key] = value
                self._held += self.size(key, value)
            while self._held > self.limit and self._items:
                self._held -= self.size(*self._items.popitem(last=False))
        return value


class PromptCodec:
    """``encode(text)``: ``tokenizer.encode(text, add_special_tokens=False)``, and ``decode(ids)``:
    ``tokenizer.decode(ids)``, chunk by chunk, each chunk remembered (thread-safe: the gateway renders
    and records in worker threads)."""

    def __init__(self, tokenizer: Any, chunk_chars: int = CHUNK_CHARS, cache_tokens: int = CACHE_TOKENS,
                 chunk_tokens: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.chunk_chars = chunk_chars
        self.chunk_tokens = chunk_tokens if chunk_tokens is not None else chunk_chars // 4
        cuts = splitters(tokenizer)
        self.pattern = re.compile("|".join(map(re.escape, cuts))) if cuts else None
        concatenates = (cuts and type(tokenizer.backend_tokenizer.decoder).__name__ == "ByteLevel"
                        and not getattr(tokenizer, "clean_up_tokenization_spaces", False))
        added = tokenizer.backend_tokenizer.get_added_tokens_decoder() if concatenates else {}
        self.cut_ids = {i for i, token in added.items() if token.content in cuts}
        self.encode_checked = self.decode_checked = False
        self.encoded = Remembered(cache_tokens, lambda text, ids: len(ids))
        self.decoded = Remembered(cache_tokens, lambda ids, text: len(ids) // 4)

    @property
    def hits(self) -> int:
        return self.encoded.hits

    @property
    def misses(self) -> int:
        return self.encoded.misses

    def encode(self, text: str) -> list[int]:
        if self.pattern is None or len(text) < 2 * self.chunk_chars:
            return self.tokenizer.encode(text, add_special_tokens=False)
        ids: list[int] = []
        for chunk in self.chunks(text):
            ids.extend(self.encoded.get(chunk, self._encode_chunk))
        if not self.encode_checked:  # the first long text is also encoded whole: a tokenizer the tests never
            self.encode_checked = True  # saw that does not encode its chunks on their own is never cut again
            whole = self.tokenizer.encode(text, add_special_tokens=False)
            if whole != ids:
                self.pattern = None
                return whole
        return ids

    def chunks(self, text: str) -> list[str]:
        """``text`` cut right before splitters, each piece at least ``chunk_chars`` long (the last one
        may be shorter): the same cuts for the same beginning, whatever follows it."""
        assert self.pattern is not None
        out, start = [], 0
        for match in self.pattern.finditer(text):
            if match.start() - start >= self.chunk_chars:
                out.append(text[start:match.start()])
                start = match.start()
        out.append(text[start:])
        return out

    def decode(self, ids: list[int]) -> str:
        if not self.cut_ids or len(ids) < 2 * self.chunk_tokens:
            return self.tokenizer.decode(ids)
        parts, start = [], 0
        for i, token in enumerate(ids):
            if token in self.cut_ids and i - start >= self.chunk_tokens:
                parts.append(self.decoded.get(array("i", ids[start:i]).tobytes(), self._decode_chunk))
                start = i
        parts.append(self.decoded.get(array("i", ids[start:]).tobytes(), self._decode_chunk))
        text = "".join(parts)
        if not self.decode_checked:  # as encode: the first long id list is also decoded whole
            self.decode_checked = True
            whole = self.tokenizer.decode(ids)
            if whole != text:
                self.cut_ids = set()
                return whole
        return text

    def _encode_chunk(self, chunk: str) -> array:
        return array("i", self.tokenizer.encode(chunk, add_special_tokens=False))

    def _decode_chunk(self, chunk: bytes) -> str:  # the ids as 4-byte ints: a key of 4 bytes a token
        return self.tokenizer.decode(array("i", chunk).tolist())


_codecs: weakref.WeakKeyDictionary[Any, PromptCodec] = weakref.WeakKeyDictionary()
_codecs_lock = threading.Lock()


def prompt_codec(tokenizer: Any) -> PromptCodec:
    """The :class:`PromptCodec` of ``tokenizer`` (one each, kept while the tokenizer lives; a new one
    each time for a tokenizer that cannot be weakly referenced)."""
    with _codecs_lock:
        try:
            codec = _codecs.get(tokenizer)
            if codec is None:
                codec = _codecs[tokenizer] = PromptCodec(tokenizer)
        except TypeError:
            return PromptCodec(tokenizer)
        return codec

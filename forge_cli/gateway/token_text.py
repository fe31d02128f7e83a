"""How tokens are shown: one token in a logprobs entry (its text, its own bytes, a JSON-safe logprob),
and a completion's output as text."""

from __future__ import annotations

import functools
import math
import re
from typing import Any

LOGPROB_FLOOR = -9999.0  # JSON has no -inf (an id masked by top-p); vLLM's OpenAI server uses the same floor
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece byte fallback


def json_logprob(value: float) -> float:
    return LOGPROB_FLOOR if math.isnan(value) or value < LOGPROB_FLOOR else value


@functools.cache
def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, inverted: each of the 256 bytes is one printable character."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def token_bytes(tokenizer: Any, token_id: int, text: str) -> bytes:
    """The token's own bytes. ``text`` (its decoded text) is right unless the token holds part of a
    UTF-8 character, which decoding turns into U+FFFD; then the bytes come from the raw piece."""
    if "\ufffd" not in text:
        return text.encode()
    piece = tokenizer.convert_ids_to_tokens(token_id)
    if isinstance(piece, str):
        if match := _BYTE_PIECE.fullmatch(piece):
            return bytes([int(match.group(1), 16)])
        decoder = _byte_level_decoder()
        if piece and all(ch in decoder for ch in piece):
            return bytes(decoder[ch] for ch in piece)
    return text.encode()


def output_text(tokenizer: Any, eos_token_id: int | None, output_ids: list[int]) -> str:
    """A completion's output as the gateway parsed it: special tokens kept, the closing EOS dropped."""
    ids = list(output_ids)
    if ids and ids[-1] == eos_token_id:
        ids = ids[:-1]
    return tokenizer.decode(ids, skip_special_tokens=False)


def logprob_entries(tokenizer: Any, output: Any) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each output token's logprob entry (``token``, ``logprob``, ``bytes``) with its ``top_logprobs``
    alternatives' entries: what Chat Completions' and Responses' logprob types both hold."""

    def entry(token_id: int, lp: float) -> dict[str, Any]:
        piece = tokenizer.decode([token_id], skip_special_tokens=False)
        return {"token": piece, "logprob": json_logprob(lp), "bytes": list(token_bytes(tokenizer, token_id, piece))}

    tops = output.top_logprobs or [[] for _ in output.output_ids]
    return [(entry(t, lp), [entry(i, v) for i, v in top]) for t, lp, top in zip(output.output_ids, output.logprobs, tops)]

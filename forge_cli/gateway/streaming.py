"""Streaming text to a client while generation runs, without ever showing a tool call as text.

:class:`ContentStream` is fed the sampled ids as they come and returns the next piece of content
that is safe to send: everything before the first tool-call marker of the session's format (or
a partial marker, or a partial stop string, at the end), with the whitespace the final parse
would strip held back. When generation ends, the whole text is parsed as in the non-streaming
path, so the streamed pieces plus the rest always equal the non-streamed content.
"""

from __future__ import annotations

from typing import Any

from forge_cli.specs import ToolFormat


class ContentStream:
    def __init__(self, tokenizer: Any, fmt: ToolFormat | None, stops: tuple[str, ...] = ()) -> None:
        self.tokenizer = tokenizer
        self.fmt = fmt  # None: no tools were offered, the text is content as it is
        self.stops = tuple(s for s in stops if s)
        self.ids: list[int] = []
        self.sent = ""

    def _text(self) -> str:
        ids = self.ids
        if ids and ids[-1] == self.tokenizer.eos_token_id:
            ids = ids[:-1]
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        return text.rstrip("\ufffd")  # an incomplete UTF-8 sequence: wait for its next bytes

    def _safe(self, text: str) -> str:
        holds = list(self.stops)
        if self.fmt is not None:
            if not self.fmt.markers:
                return ""
            holds += list(self.fmt.markers)
            text = text.lstrip()
        cut = len(text)
        for mark in holds:
            at = text.find(mark)
            if at != -1:
                cut = min(cut, at)
            for k in range(min(len(mark) - 1, len(text)), 0, -1):
                if text.endswith(mark[:k]):
                    cut = min(cut, len(text) - k)
                    break
        safe = text[:cut]
        return safe.rstrip() if self.fmt is not None else safe

    def feed(self, new_ids: list[int]) -> str:
        """Add sampled ids; return the content that may be sent now."""
        self.ids.extend(new_ids)
        safe = self._safe(self._text())
        if len(safe) <= len(self.sent) or not safe.startswith(self.sent):
            return ""
        piece, self.sent = safe[len(self.sent):], safe
        return piece

    def rest(self, final_content: str) -> str:
        """What remains to send once the final parse gave ``final_content``."""
        if final_content.startswith(self.sent):
            return final_content[len(self.sent):]
        return ""  # cannot happen while the format's markers are right; never resend

"""Streaming text to a client while generation runs, without ever showing a tool call as text.

:class:`ContentStream` is fed the sampled ids as they come and returns the next piece of content
that is safe to send: everything before the first tool-call marker of the session's format (or
a partial marker, or a partial stop string, at the end), with the whitespace the final parse
would strip held back. When generation ends, the whole text is parsed as in the non-streaming
path, so the streamed pieces plus the rest always equal the non-streamed content.

With the model's reasoning parser, thinking streams first (:meth:`ContentStream.feed_parts`): the
text after the parser's start marker, up to its end marker (a partial one held back); content
starts after the end marker. Text that does not open with the start marker may be either (a
prompt can open the thinking): it is held until the end marker or the end of generation.
"""

from __future__ import annotations

from typing import Any

from forge_cli.specs import ReasoningParser, ToolFormat


class ContentStream:
    def __init__(self, tokenizer: Any, fmt: ToolFormat | None, stops: tuple[str, ...] = (),
                 reasoning: ReasoningParser | None = None) -> None:
        self.tokenizer = tokenizer
        self.fmt = fmt  # None: no tools were offered, the text is content as it is
        self.stops = tuple(s for s in stops if s)
        self.reasoning = reasoning
        self.ids: list[int] = []
        self.sent = ""
        self.sent_reasoning = ""

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

    def _split(self, text: str) -> tuple[str, str | None]:
        """(thinking safe to send, content text or None while it is not known to have begun)."""
        r = self.reasoning
        if r is None:
            return "", text
        opened = bool(r.start) and text.lstrip().startswith(r.start)
        if r.end and r.end in text:
            before, _, after = text.partition(r.end)
            return (before.lstrip()[len(r.start):] if opened else before), after
        if not opened:
            return "", None
        inner = text.lstrip()[len(r.start):]
        for k in range(min(len(r.end) - 1, len(inner)), 0, -1):  # a partial end marker: wait
            if inner.endswith(r.end[:k]):
                return inner[:-k], None
        return inner, None

    def feed_parts(self, new_ids: list[int]) -> tuple[str, str]:
        """Add sampled ids; return the (thinking, content) that may be sent now."""
        self.ids.extend(new_ids)
        thinking, content = self._split(self._text())
        piece_r = ""
        if len(thinking) > len(self.sent_reasoning) and thinking.startswith(self.sent_reasoning):
            piece_r, self.sent_reasoning = thinking[len(self.sent_reasoning):], thinking
        if content is None:
            return piece_r, ""
        safe = self._safe(content)
        if len(safe) <= len(self.sent) or not safe.startswith(self.sent):
            return piece_r, ""
        piece, self.sent = safe[len(self.sent):], safe
        return piece_r, piece

    def feed(self, new_ids: list[int]) -> str:
        """Add sampled ids; return the content that may be sent now."""
        return self.feed_parts(new_ids)[1]

    def rest(self, final_content: str) -> str:
        """What remains to send once the final parse gave ``final_content``."""
        if final_content.startswith(self.sent):
            return final_content[len(self.sent):]
        return ""  # cannot happen while the format's markers are right; never resend

    def rest_reasoning(self, final_reasoning: str) -> str:
        """What remains of the thinking once the final split gave ``final_reasoning``."""
        if final_reasoning.startswith(self.sent_reasoning):
            return final_reasoning[len(self.sent_reasoning):]
        return ""

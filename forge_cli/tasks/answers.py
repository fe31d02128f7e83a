"""How final answers are read and compared: the built-in exact-match and numeric verifiers.

The rules (the same for every built-in suite; docs/plugins.md repeats them):

- **The answer part.** If the agent's answer contains ``answer:``, ``answer is`` or ``answer is:``
  (any case, e.g. ``Final answer: Paris``), only the text after the *last* such marker counts, up to the end of
  its line; otherwise the whole text counts. ``\\boxed{x}`` counts as ``x``.
- **Exact match** (:func:`normalise`): case-folded, runs of whitespace folded to one space,
  surrounding quotes, backticks and ``*``/``_`` emphasis removed, trailing ``. , ; : ! ?`` removed.
  The task's answer is normalised the same way; a list of strings in ``task.answer`` means any of
  them is right.
- **Numeric** (:func:`extract_number`): in the answer part, the first number after a marker, or
  else the last number in the text. ``1,234`` is 1234 (commas only as thousands separators),
  ``-3.5`` and ``2e3`` are numbers. A whole-number answer must be given exactly (``42.0`` is 42);
  any other matches when ``|got - want| <= 1e-6 * max(1, |want|)``.

No answer (``None``) or one that holds no number scores 0 with a reason saying so.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from forge_cli.tasks.calculator import format_number
from forge_cli.tasks.types import Outcome, Task, Transcript

_MARKER = re.compile(r"answer\s*(?::|is\b\s*:?)\s*", re.IGNORECASE)  # "answer:", "answer is", "answer is:"
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")
_WRAPPERS = "\"'`*_ \t\n"
_TRAILING = ".,;:!? \t\n"


def answer_part(text: str) -> tuple[str, bool]:
    """The part of ``text`` that is the answer, and whether an ``answer:`` marker picked it."""
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1], True
    markers = list(_MARKER.finditer(text))
    if markers:
        return text[markers[-1].end():].split("\n", 1)[0], True
    return text, False


def normalise(text: str) -> str:
    """``text`` as exact match compares it: case-folded, whitespace folded, wrappers and trailing punctuation gone."""
    text = " ".join(text.casefold().split())
    previous = None
    while previous != text:
        previous = text
        text = text.strip(_WRAPPERS).rstrip(_TRAILING)
    return text


def extract_number(text: str) -> float | None:
    """The number an answer gives (see the module's rules), or ``None`` if it gives none."""
    part, marked = answer_part(text)
    found = _NUMBER.findall(part)
    if not found:
        return None
    raw = found[0] if marked else found[-1]
    try:
        value = float(raw.replace(",", ""))
    except ValueError:  # pragma: no cover - the pattern only matches floats
        return None
    return value if math.isfinite(value) else None


def exact_match(answer: str | None, expected: Any) -> tuple[bool, str]:
    """Whether ``answer`` matches ``expected`` (a string, or a list of accepted strings), and why."""
    if answer is None:
        return False, "no answer"
    accepted = expected if isinstance(expected, (list, tuple)) else [expected]
    got = normalise(answer_part(answer)[0])
    if not got:
        return False, "empty answer"
    for want in accepted:
        if got == normalise(str(want)):
            return True, f"answer {got!r} matches"
    return False, f"answer {got!r} is not {normalise(str(accepted[0]))!r}"


def numeric_match(answer: str | None, expected: float, rel_tol: float = 1e-6) -> tuple[bool, str]:
    """Whether the number in ``answer`` equals ``expected`` (exactly when it is a whole number, else
    within ``rel_tol * max(1, |expected|)``), and why."""
    if answer is None:
        return False, "no answer"
    got = extract_number(answer)
    if got is None:
        return False, "the answer holds no number"
    want = float(expected)
    ok = got == want if want.is_integer() else abs(got - want) <= rel_tol * max(1.0, abs(want))
    if ok:
        return True, f"{format_number(got)} is right"
    return False, f"{format_number(got)} is not {format_number(want)}"


class ExactMatch:
    """Verifier: the transcript's answer equals ``task.answer`` after :func:`normalise` (score 1 or 0)."""

    def verify(self, task: Task, workdir: Path, transcript: Transcript) -> Outcome:
        ok, reason = exact_match(transcript.answer, task.answer)
        return Outcome(1.0 if ok else 0.0, reason)


class NumericMatch:
    """Verifier: the number in the transcript's answer equals ``task.answer`` (score 1 or 0)."""

    def __init__(self, rel_tol: float = 1e-6) -> None:
        self.rel_tol = rel_tol

    def verify(self, task: Task, workdir: Path, transcript: Transcript) -> Outcome:
        ok, reason = numeric_match(transcript.answer, task.answer, self.rel_tol)
        return Outcome(1.0 if ok else 0.0, reason)

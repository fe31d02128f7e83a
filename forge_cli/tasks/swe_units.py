"""The catalogue the ``swe-mini`` suite builds its repositories from: :data:`UNITS`.

A :class:`Unit` is one function or class a generated module can hold: its correct source (with
``{name}`` for the name it gets), the bugs that can be planted in it (each a :class:`Bug`: one to a
few whole lines of the correct source and what they become) and a generator of the test cases that
exercise it. Sources are plain Python 3.9 with no imports, so the tests need nothing but ``python3``.

:func:`repair` undoes any catalogue bug it finds in a module's text: what the scripted demo policy
uses to fix a file the way an agent that knows these bug patterns would (the suite only keeps
repositories it repairs exactly).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

BUG_KINDS = ("off-by-one", "wrong-operator", "wrong-comparison", "swapped-arguments", "missing-case")


@dataclass(frozen=True)
class Bug:
    """A planted bug: the lines ``old`` of the correct source (exactly once in it) become ``new``."""

    kind: str
    old: str
    new: str


@dataclass(frozen=True)
class Unit:
    """One function (``cases`` give argument tuples) or class (``cases`` give expressions over
    ``{name}``) of the catalogue; ``caller`` names the function of the ``api`` module that applies a
    function unit to rows of arguments (tests through it do not name the unit)."""

    key: str
    names: tuple[str, ...]
    source: str
    bugs: tuple[Bug, ...]
    cases: Callable[[random.Random], list[Any]]
    caller: str = ""

    @property
    def is_class(self) -> bool:
        return self.source.startswith("class ")


def _ints(rng: random.Random, lo: int, hi: int, n: int) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


WORDS = ("alpha", "river", "stone", "maple", "cloud", "ember", "frost", "grove", "harbor", "lantern", "meadow",
         "orbit", "pebble", "quill", "raven", "summit", "timber", "velvet", "willow", "zenith")


def _clamp_cases(rng: random.Random) -> list[Any]:
    lo = rng.randint(-20, 10)
    hi = lo + rng.randint(5, 30)
    return [(lo - rng.randint(1, 9), lo, hi), (hi + rng.randint(1, 9), lo, hi), (rng.randint(lo + 1, hi - 1), lo, hi),
            (lo, lo, hi), (hi, lo, hi)]


def _mean_cases(rng: random.Random) -> list[Any]:
    out: list[Any] = [([],)]
    for _ in range(3):
        n = rng.choice((2, 4, 5))
        out.append((_ints(rng, 0, 40, n),))
    rng.shuffle(out)
    return out


def _total_cases(rng: random.Random) -> list[Any]:
    return [(_ints(rng, -5, 20, rng.randint(2, 6)),) for _ in range(3)] + [([],)]


def _chunk_cases(rng: random.Random) -> list[Any]:
    out = []
    for _ in range(3):
        size = rng.randint(2, 4)
        items = _ints(rng, 0, 9, size * rng.randint(1, 3) + rng.randint(0, size - 1))
        out.append((items, size))
    return out


def _pairs_cases(rng: random.Random) -> list[Any]:
    out = []
    for _ in range(3):
        keys = rng.sample(WORDS, rng.randint(1, 4))
        text = "; ".join(f"{k}={rng.randint(0, 99)}" for k in keys)
        out.append((text + rng.choice(("", ";", "; ")),))
    out.append(("",))
    return out


def _palindrome_cases(rng: random.Random) -> list[Any]:
    word = rng.choice(WORDS)
    return [(word[0].upper() + word[1:] + word[::-1],), (f"{word}, {word}",), ("Never odd or even",),
            (f"{rng.randint(10, 99)}x{rng.randint(10, 99)}",), ("A1b2B1a",)]


def _grade_cases(rng: random.Random) -> list[Any]:
    return [(90,), (80,), (70,), (rng.randint(91, 100),), (rng.randint(0, 69),), (rng.randint(71, 79),)]


def _truncate_cases(rng: random.Random) -> list[Any]:
    out = []
    for _ in range(2):
        word = " ".join(rng.sample(WORDS, 3))
        out.append((word, rng.randint(6, len(word) - 2)))
    word = rng.choice(WORDS)
    out += [(word, len(word)), (word, len(word) + 3)]
    return out


def _vowels_cases(rng: random.Random) -> list[Any]:
    return [(" ".join(rng.sample(WORDS, 2)).title(),), ("AEIOU xyz",), (rng.choice(WORDS).upper(),), ("",)]


def _find_cases(rng: random.Random) -> list[Any]:
    items = rng.sample(range(10, 60), rng.randint(4, 7))
    return [(items, items[0]), (items, items[-1]), (items, items[len(items) // 2]), (items, 99)]


def _percent_cases(rng: random.Random) -> list[Any]:
    whole = rng.choice((4, 8, 20, 25, 50))
    return [(rng.randint(0, whole), whole), (whole, whole), (rng.randint(1, whole - 1), whole), (3, 0)]


def _dedupe_cases(rng: random.Random) -> list[Any]:
    return [(_ints(rng, 0, 5, rng.randint(5, 9)),) for _ in range(3)] + [(list(rng.sample(WORDS, 3)) * 2,)]


def _between_cases(rng: random.Random) -> list[Any]:
    lo = rng.randint(-10, 10)
    hi = lo + rng.randint(3, 12)
    return [(lo, lo, hi), (hi, lo, hi), (lo - 1, lo, hi), (hi + 1, lo, hi), (rng.randint(lo + 1, hi - 1), lo, hi)]


def _snake_cases(rng: random.Random) -> list[Any]:
    a, b, c = rng.sample(WORDS, 3)
    return [(a + b.title(),), (a.title() + b.title() + c.title(),), (a,), ("aB",)]


def _initials_cases(rng: random.Random) -> list[Any]:
    return [(" ".join(w.title() for w in rng.sample(WORDS, n)),) for n in (2, 3, 1)] + [("",)]


def _tally_cases(rng: random.Random) -> list[Any]:
    item, other = rng.sample(WORDS, 2)
    n = rng.randint(2, 6)
    return [f"{{name}}().add({item!r}, {n}).remove({item!r}, {n}).items()",
            f"{{name}}().add({item!r}, {n}).add({other!r}).remove({item!r}).items()",
            f"{{name}}().add({item!r}, {n}).add({other!r}, 2).total()",
            f"{{name}}().add({other!r}).remove({other!r}, 5).total()"]


def _stack_cases(rng: random.Random) -> list[Any]:
    a, b, c = _ints(rng, 1, 99, 3)
    return [f"{{name}}().push({a}).push({b}).peek()", f"{{name}}().push({a}).push({b}).push({c}).pop()",
            f"{{name}}().push({a}).size()", f"{{name}}().pop()", f"len({{name}}().push({a}).push({b}).items)"]


UNITS: tuple[Unit, ...] = (
    Unit("clamp", ("clamp", "bound", "limit_to_range"), '''def {name}(value, low, high):
    """Limit value to the range [low, high]."""
    if value < low:
        return low
    if value > high:
        return high
    return value
''', (Bug("wrong-comparison", "    if value < low:\n", "    if value > low:\n"),
      Bug("missing-case", "    if value > high:\n        return high\n", ""),
      Bug("swapped-arguments", "        return high\n", "        return low\n")), _clamp_cases, "limit_readings"),
    Unit("mean", ("mean", "average", "arithmetic_mean"), '''def {name}(values):
    """The mean of a list of numbers (0.0 for an empty list)."""
    if not values:
        return 0.0
    return sum(values) / len(values)
''', (Bug("off-by-one", "    return sum(values) / len(values)\n", "    return sum(values) / (len(values) + 1)\n"),
      Bug("wrong-operator", "    return sum(values) / len(values)\n", "    return sum(values) // len(values)\n"),
      Bug("missing-case", "    if not values:\n        return 0.0\n", "")), _mean_cases, "average_rows"),
    Unit("running_total", ("running_total", "prefix_sums", "cumulative"), '''def {name}(values):
    """The running totals of a list of numbers."""
    totals = []
    acc = 0
    for v in values:
        acc += v
        totals.append(acc)
    return totals
''', (Bug("wrong-operator", "        acc += v\n", "        acc = v\n"),
      Bug("wrong-operator", "        acc += v\n", "        acc -= v\n"),
      Bug("off-by-one", "        acc += v\n        totals.append(acc)\n", "        totals.append(acc)\n        acc += v\n")),
     _total_cases, "totals_for"),
    Unit("chunk", ("chunk", "batches", "split_every"), '''def {name}(items, size):
    """Split items into lists of size items (the last one may be shorter)."""
    return [items[i:i + size] for i in range(0, len(items), size)]
''', (Bug("off-by-one", "    return [items[i:i + size] for i in range(0, len(items), size)]\n",
          "    return [items[i:i + size - 1] for i in range(0, len(items), size)]\n"),
      Bug("off-by-one", "    return [items[i:i + size] for i in range(0, len(items), size)]\n",
          "    return [items[i:i + size] for i in range(1, len(items), size)]\n")), _chunk_cases, "chunk_all"),
    Unit("parse_pairs", ("parse_pairs", "parse_settings", "read_assignments"), '''def {name}(text):
    """Parse "key=number; key=number" into a dict of ints (empty parts are skipped)."""
    result = {{}}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        key, _, value = part.partition("=")
        result[key.strip()] = int(value)
    return result
''', (Bug("missing-case", "        if not part:\n            continue\n", ""),
      Bug("swapped-arguments", "        key, _, value = part.partition(\"=\")\n", "        value, _, key = part.partition(\"=\")\n")),
     _pairs_cases, "parse_all"),
    Unit("is_palindrome", ("is_palindrome", "reads_both_ways", "mirrored"), '''def {name}(text):
    """Whether text reads the same both ways, ignoring case and anything but letters and digits."""
    cleaned = [c.lower() for c in text if c.isalnum()]
    return cleaned == cleaned[::-1]
''', (Bug("missing-case", "    cleaned = [c.lower() for c in text if c.isalnum()]\n", "    cleaned = [c for c in text if c.isalnum()]\n"),
      Bug("missing-case", "    cleaned = [c.lower() for c in text if c.isalnum()]\n",
          "    cleaned = [c.lower() for c in text if c.isalpha()]\n")), _palindrome_cases, "check_phrases"),
    Unit("grade", ("grade", "letter_grade", "rank_score"), '''def {name}(score):
    """The letter for a score out of 100: A from 90, B from 80, C from 70, else F."""
    if score >= 90:
        return "A"
    if score >= 80:
        return "B"
    if score >= 70:
        return "C"
    return "F"
''', (Bug("wrong-comparison", "    if score >= 90:\n", "    if score > 90:\n"),
      Bug("wrong-comparison", "    if score >= 80:\n", "    if score > 80:\n"),
      Bug("missing-case", "    if score >= 70:\n        return \"C\"\n", "")), _grade_cases, "grade_all"),
    Unit("truncate", ("truncate", "shorten", "ellipsize"), '''def {name}(text, width):
    """text cut to at most width characters, ending in "..." when it was cut."""
    if len(text) <= width:
        return text
    return text[:width - 3] + "..."
''', (Bug("wrong-comparison", "    if len(text) <= width:\n", "    if len(text) < width:\n"),
      Bug("off-by-one", "    return text[:width - 3] + \"...\"\n", "    return text[:width - 2] + \"...\"\n"),
      Bug("wrong-operator", "    return text[:width - 3] + \"...\"\n", "    return text[:width + 3] + \"...\"\n")),
     _truncate_cases, "shorten_titles"),
    Unit("count_vowels", ("count_vowels", "vowel_count", "vowels_in"), '''def {name}(text):
    """How many vowels (a, e, i, o, u, any case) text holds."""
    return sum(1 for c in text.lower() if c in "aeiou")
''', (Bug("missing-case", "    return sum(1 for c in text.lower() if c in \"aeiou\")\n",
          "    return sum(1 for c in text if c in \"aeiou\")\n"),
      Bug("wrong-comparison", "    return sum(1 for c in text.lower() if c in \"aeiou\")\n",
          "    return sum(1 for c in text.lower() if c not in \"aeiou\")\n")), _vowels_cases, "count_all"),
    Unit("find_index", ("find_index", "position_of", "index_of"), '''def {name}(items, target):
    """The index of target's first occurrence in items, or -1."""
    for i in range(len(items)):
        if items[i] == target:
            return i
    return -1
''', (Bug("off-by-one", "    for i in range(len(items)):\n", "    for i in range(1, len(items)):\n"),
      Bug("off-by-one", "    for i in range(len(items)):\n", "    for i in range(len(items) - 1):\n"),
      Bug("wrong-comparison", "        if items[i] == target:\n", "        if items[i] != target:\n")),
     _find_cases, "locate_all"),
    Unit("percent", ("percent", "percentage", "share_of"), '''def {name}(part, whole):
    """part as a percentage of whole, rounded to one decimal (0.0 when whole is 0)."""
    if whole == 0:
        return 0.0
    return round(100 * part / whole, 1)
''', (Bug("swapped-arguments", "    return round(100 * part / whole, 1)\n", "    return round(100 * whole / part, 1)\n"),
      Bug("missing-case", "    if whole == 0:\n        return 0.0\n", ""),
      Bug("wrong-operator", "    return round(100 * part / whole, 1)\n", "    return round(100 + part / whole, 1)\n")),
     _percent_cases, "percentages"),
    Unit("dedupe", ("dedupe", "unique", "distinct"), '''def {name}(items):
    """items without repeats, in the order of their first occurrence."""
    seen = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out
''', (Bug("missing-case", "            seen.add(item)\n", ""),
      Bug("wrong-comparison", "        if item not in seen:\n", "        if item in seen:\n")), _dedupe_cases, "dedupe_rows"),
    Unit("between", ("between", "in_range", "within"), '''def {name}(x, low, high):
    """Whether low <= x <= high."""
    return low <= x <= high
''', (Bug("wrong-comparison", "    return low <= x <= high\n", "    return low < x <= high\n"),
      Bug("wrong-comparison", "    return low <= x <= high\n", "    return low <= x < high\n"),
      Bug("swapped-arguments", "    return low <= x <= high\n", "    return x <= low <= high\n")), _between_cases, "check_ranges"),
    Unit("snake_case", ("snake_case", "to_snake", "underscore_name"), '''def {name}(name):
    """camelCase or PascalCase name in snake_case."""
    out = []
    for i, c in enumerate(name):
        if c.isupper() and i > 0:
            out.append("_")
        out.append(c.lower())
    return "".join(out)
''', (Bug("off-by-one", "        if c.isupper() and i > 0:\n", "        if c.isupper() and i > 1:\n"),
      Bug("wrong-comparison", "        if c.isupper() and i > 0:\n", "        if c.isupper() and i >= 0:\n"),
      Bug("missing-case", "        out.append(c.lower())\n", "        out.append(c)\n")), _snake_cases, "convert_names"),
    Unit("initials", ("initials", "monogram", "first_letters"), '''def {name}(text):
    """The upper-case first letters of the words of text, joined with dots ("Ada Lovelace" -> "A.L")."""
    return ".".join(word[0].upper() for word in text.split())
''', (Bug("off-by-one", "    return \".\".join(word[0].upper() for word in text.split())\n",
          "    return \".\".join(word[1].upper() for word in text.split())\n"),
      Bug("swapped-arguments", "    return \".\".join(word[0].upper() for word in text.split())\n",
          "    return \".\".join(word[0].upper() for word in text.split(\".\"))\n")), _initials_cases, "initials_of"),
    Unit("tally", ("Tally", "Counter", "Inventory"), '''class {name}:
    """Counts of items; add and remove return the tally itself, so calls chain."""

    def __init__(self):
        self.counts = {{}}

    def add(self, item, n=1):
        self.counts[item] = self.counts.get(item, 0) + n
        return self

    def remove(self, item, n=1):
        left = self.counts.get(item, 0) - n
        if left > 0:
            self.counts[item] = left
        else:
            self.counts.pop(item, None)
        return self

    def items(self):
        return sorted(self.counts.items())

    def total(self):
        return sum(self.counts.values())
''', (Bug("wrong-comparison", "        if left > 0:\n", "        if left >= 0:\n"),
      Bug("wrong-operator", "        left = self.counts.get(item, 0) - n\n", "        left = self.counts.get(item, 0) + n\n"),
      Bug("missing-case", "        else:\n            self.counts.pop(item, None)\n", "")), _tally_cases),
    Unit("stack", ("Stack", "Pile", "LifoQueue"), '''class {name}:
    """A last-in first-out stack; push returns the stack itself, pop and peek give None when empty."""

    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)
        return self

    def pop(self):
        if not self.items:
            return None
        return self.items.pop()

    def peek(self):
        if not self.items:
            return None
        return self.items[-1]

    def size(self):
        return len(self.items)
''', (Bug("off-by-one", "        return self.items[-1]\n", "        return self.items[0]\n"),
      Bug("missing-case", "    def pop(self):\n        if not self.items:\n            return None\n", "    def pop(self):\n"),
      Bug("off-by-one", "        return len(self.items)\n", "        return len(self.items) - 1\n")), _stack_cases),
)


def render(unit: Unit, name: str) -> str:
    """The unit's correct source under ``name``."""
    return unit.source.format(name=name)


def plant(source: str, bug: Bug) -> str:
    """``source`` with ``bug`` planted (its ``old`` lines must occur exactly once)."""
    if source.count(bug.old) != 1:
        raise ValueError(f"the bug's lines occur {source.count(bug.old)} times, not once: {bug.old!r}")
    return source.replace(bug.old, bug.new)


def repair(text: str) -> tuple[str, list[tuple[str, str]]]:
    """``text`` with every catalogue bug it shows undone, and the ``(buggy lines, fixed lines)``
    replacements made: a bug is recognised where its buggy lines stand and its correct ones do not.
    A bug that only removed lines is recognised by the lines around the gap (the unit's source
    without them, rendered under every name, must occur in ``text``)."""
    edits: list[tuple[str, str]] = []
    for unit in UNITS:
        for name in unit.names:
            correct = render(unit, name)
            for bug in unit.bugs:
                buggy = plant(correct, bug)
                if buggy in text and correct not in text:
                    old, new = _narrow(buggy, correct, text)
                    text = text.replace(buggy, correct)
                    edits.append((old, new))
    return text, edits


def _narrow(buggy: str, correct: str, text: str) -> tuple[str, str]:
    """The smallest run of whole lines that turns ``buggy`` into ``correct`` and occurs once in
    ``text`` (the module ``buggy`` stands in): lines of context are added around the change until it
    is unique, and at least one when lines were only removed (so the edit's old text is never empty)."""
    a, b = buggy.splitlines(keepends=True), correct.splitlines(keepends=True)
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    while True:
        old, new = "".join(a[start:len(a) - end]), "".join(b[start:len(b) - end])
        if old and text.count(old) == 1:
            return old, new
        if start > 0:
            start -= 1
        elif end > 0:
            end -= 1
        else:
            return old, new  # the whole unit: unique, since it stands in text once

"""The ``files`` suite: create or edit files in the trajectory's work directory.

``task.files`` seed the work directory (the driver writes them before the agent starts); the
agent works with ``read_file``/``write_file``/``list_files`` (confined to the work directory,
:mod:`forge_cli.tasks.workdir`) or, black-box, with whatever it has. The verifier
(:class:`~forge_cli.tasks.workdir.FilesMatch`) compares the files named in
``task.answer["files"]`` with their expected text. Kinds, by difficulty:

1. ``create`` a file holding one given line; ``edit`` one ``key = value`` line of a settings file;
2. ``sum`` the numbers of a file into a new one; ``upper``: an upper-case copy of a file;
3. ``sort`` a file's lines in place and write their count to another file.
"""

from __future__ import annotations

import json
import random

from forge_cli.tasks.splits import Draft, draw
from forge_cli.tasks.types import Split, Task, TaskSuite
from forge_cli.tasks.workdir import FilesMatch, tools

NAME = "files"

WORDS = ("apple", "breeze", "candle", "delta", "ember", "forest", "glacier", "harbor", "island", "jungle",
         "kettle", "lagoon", "meadow", "nectar", "orbit", "pepper", "quartz", "ribbon", "saddle", "thistle",
         "umber", "violet", "willow", "yonder", "zephyr")
FOLDERS = ("notes", "docs", "out", "data", "reports")
KEYS = ("port", "host", "timeout", "retries", "mode", "level", "workers", "cache")


def _line(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 6)))


def _create(rng: random.Random) -> Draft:
    path = f"{rng.choice(FOLDERS)}/{rng.choice(WORDS)}.txt"
    line = _line(rng)
    return Draft(key="", prompt=f"Create a file named {path} containing exactly this line: {line}",
                 answer={"files": {path: line + "\n"}}, difficulty="1", meta={"kind": "create"})


def _edit(rng: random.Random) -> Draft:
    keys = rng.sample(KEYS, rng.randint(3, 6))
    values = {k: str(rng.randint(1, 9999)) for k in keys}
    before = "".join(f"{k} = {v}\n" for k, v in values.items())
    key = rng.choice(keys)
    new = str(rng.randint(10000, 99999))
    after = "".join(f"{k} = {new if k == key else v}\n" for k, v in values.items())
    return Draft(key="", prompt=f"In settings.ini, change the value of {key} to {new}; leave every other line as it is.",
                 answer={"files": {"settings.ini": after}}, difficulty="1", files={"settings.ini": before},
                 meta={"kind": "edit"})


def _sum(rng: random.Random) -> Draft:
    numbers = [rng.randint(-500, 5000) for _ in range(rng.randint(3, 8))]
    text = "".join(f"{x}\n" for x in numbers)
    return Draft(key="", prompt="numbers.txt holds one integer per line. Write their sum to a new file total.txt "
                 "(the number alone); leave numbers.txt as it is.",
                 answer={"files": {"total.txt": f"{sum(numbers)}\n", "numbers.txt": text}}, difficulty="2",
                 files={"numbers.txt": text}, meta={"kind": "sum"})


def _upper(rng: random.Random) -> Draft:
    source = f"{rng.choice(WORDS)}.txt"
    target = f"{rng.choice(FOLDERS)}/{source.removesuffix('.txt')}-upper.txt"
    text = "".join(_line(rng) + "\n" for _ in range(rng.randint(2, 4)))
    return Draft(key="", prompt=f"Make a copy of {source} named {target} with every letter in upper case; "
                 f"keep {source} as it is.", answer={"files": {source: text, target: text.upper()}},
                 difficulty="2", files={source: text}, meta={"kind": "upper"})


def _sort(rng: random.Random) -> Draft:
    names = rng.sample(WORDS, rng.randint(4, 9))
    text = "".join(f"{n}\n" for n in names)
    return Draft(key="", prompt="Sort the lines of names.txt alphabetically, in place, and write the number of "
                 "lines to count.txt (the number alone).",
                 answer={"files": {"names.txt": "".join(f"{n}\n" for n in sorted(names)),
                                   "count.txt": f"{len(names)}\n"}},
                 difficulty="3", files={"names.txt": text}, meta={"kind": "sort"})


KINDS = (_create, _edit, _sum, _upper, _sort)


def generate(rng: random.Random) -> Draft:
    """One files task; its key is its prompt and seeded files together."""
    draft = rng.choice(KINDS)(rng)
    key = json.dumps([draft.prompt, draft.files], sort_keys=True)
    return Draft(key=key, prompt=draft.prompt, answer=draft.answer, difficulty=draft.difficulty,
                 files=draft.files, meta=draft.meta)


def files_suite() -> TaskSuite:
    """The ``files`` suite (see the module's docstring)."""

    def make(split: Split, n: int, seed: int) -> list[Task]:
        return draw(NAME, split, n, seed, generate)

    return TaskSuite(name=NAME, description="Create or edit files in the work directory with read_file/write_file/"
                     "list_files (difficulty 1-3); the verifier inspects the files.", make=make,
                     verifier=FilesMatch(), tools=tools)

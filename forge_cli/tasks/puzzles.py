"""The tool-free suites ``reasoning`` and ``qa``: exact-match answers, so reasoning, QA and agent tasks mix.

``reasoning`` is generated from the seed: age chains ("Ann is 12. Ben is 3 years older than Ann.
How old is Ben?", difficulty = the number of relations, 1–4), number sequences (next term of an
arithmetic progression, difficulty 1; of a geometric one, 2) and letter puzzles (count a letter
in a word or reverse a word, difficulty 1). ``qa`` asks short factual questions over a fixed
built-in table of countries and chemical elements (one look-up: difficulty 1; two chained, e.g.
the symbol of the element with atomic number 8: difficulty 2). Both are judged by
:class:`~forge_cli.tasks.answers.ExactMatch` (case, whitespace and trailing punctuation ignored).
"""

from __future__ import annotations

import random
from typing import Iterator

from forge_cli.tasks.answers import ExactMatch
from forge_cli.tasks.splits import Draft, draw, pick
from forge_cli.tasks.types import Split, Task, TaskSuite

PEOPLE = ("Ann", "Ben", "Cal", "Dana", "Eli", "Fay", "Gus", "Hana", "Ivo", "June", "Kai", "Lena")
WORDS = ("strawberry", "banana", "mississippi", "parallel", "committee", "bookkeeper", "balloon", "engineering",
         "occurrence", "assessment", "tomorrow", "programming", "letter", "coffee", "referee", "giraffe")

# country, capital, continent
COUNTRIES = (
    ("France", "Paris", "Europe"), ("Germany", "Berlin", "Europe"), ("Italy", "Rome", "Europe"),
    ("Spain", "Madrid", "Europe"), ("Portugal", "Lisbon", "Europe"), ("Poland", "Warsaw", "Europe"),
    ("Greece", "Athens", "Europe"), ("Sweden", "Stockholm", "Europe"), ("Norway", "Oslo", "Europe"),
    ("Finland", "Helsinki", "Europe"), ("Ireland", "Dublin", "Europe"), ("Austria", "Vienna", "Europe"),
    ("Hungary", "Budapest", "Europe"), ("Egypt", "Cairo", "Africa"), ("Kenya", "Nairobi", "Africa"),
    ("Nigeria", "Abuja", "Africa"), ("Ghana", "Accra", "Africa"), ("Morocco", "Rabat", "Africa"),
    ("Ethiopia", "Addis Ababa", "Africa"), ("Senegal", "Dakar", "Africa"), ("Japan", "Tokyo", "Asia"),
    ("China", "Beijing", "Asia"), ("India", "New Delhi", "Asia"), ("Thailand", "Bangkok", "Asia"),
    ("Vietnam", "Hanoi", "Asia"), ("Indonesia", "Jakarta", "Asia"), ("Nepal", "Kathmandu", "Asia"),
    ("Mongolia", "Ulaanbaatar", "Asia"), ("Canada", "Ottawa", "North America"),
    ("Mexico", "Mexico City", "North America"), ("Cuba", "Havana", "North America"),
    ("Jamaica", "Kingston", "North America"), ("Brazil", "Brasilia", "South America"),
    ("Argentina", "Buenos Aires", "South America"), ("Peru", "Lima", "South America"),
    ("Chile", "Santiago", "South America"), ("Colombia", "Bogota", "South America"),
    ("Australia", "Canberra", "Oceania"), ("New Zealand", "Wellington", "Oceania"), ("Fiji", "Suva", "Oceania"),
)
# element, symbol, atomic number
ELEMENTS = (
    ("hydrogen", "H", 1), ("helium", "He", 2), ("lithium", "Li", 3), ("beryllium", "Be", 4), ("boron", "B", 5),
    ("carbon", "C", 6), ("nitrogen", "N", 7), ("oxygen", "O", 8), ("fluorine", "F", 9), ("neon", "Ne", 10),
    ("sodium", "Na", 11), ("magnesium", "Mg", 12), ("aluminium", "Al", 13), ("silicon", "Si", 14),
    ("phosphorus", "P", 15), ("sulfur", "S", 16), ("chlorine", "Cl", 17), ("argon", "Ar", 18),
    ("potassium", "K", 19), ("calcium", "Ca", 20), ("iron", "Fe", 26), ("copper", "Cu", 29), ("zinc", "Zn", 30),
    ("silver", "Ag", 47), ("tin", "Sn", 50), ("iodine", "I", 53), ("gold", "Au", 79), ("mercury", "Hg", 80),
    ("lead", "Pb", 82), ("uranium", "U", 92),
)
SUFFIX = " Reply with the answer alone."


# ---- reasoning ---------------------------------------------------------------------------------------


def _ages(rng: random.Random) -> Draft:
    relations = rng.randint(1, 4)
    names = rng.sample(PEOPLE, relations + 1)
    age = rng.randint(5, 40)
    facts = [f"{names[0]} is {age} years old."]
    for before, after in zip(names, names[1:]):
        delta = rng.randint(1, 9)
        if rng.random() < 0.5 or age - delta < 1:
            facts.append(f"{after} is {delta} years older than {before}.")
            age += delta
        else:
            facts.append(f"{after} is {delta} years younger than {before}.")
            age -= delta
    rng.shuffle(facts)
    question = " ".join(facts) + f" How old is {names[-1]}?"
    return Draft(key=question, prompt=question + " Reply with the number alone.", answer=str(age),
                 difficulty=str(relations), meta={"kind": "ages"})


def _sequence(rng: random.Random) -> Draft:
    if rng.random() < 0.5:
        start, step = rng.randint(-20, 50), rng.choice([i for i in range(-9, 13) if i])
        terms = [start + step * i for i in range(5)]
        kind, difficulty = "arithmetic", "1"
    else:
        start, ratio = rng.randint(1, 6), rng.choice([2, 3, -2])
        terms = [start * ratio**i for i in range(5)]
        kind, difficulty = "geometric", "2"
    shown = ", ".join(str(t) for t in terms[:4])
    question = f"What is the next number in the sequence {shown}, ...?"
    return Draft(key=question, prompt=question + " Reply with the number alone.", answer=str(terms[4]),
                 difficulty=difficulty, meta={"kind": kind})


def _letters(rng: random.Random) -> Draft:
    word = rng.choice(WORDS)
    if rng.random() < 0.5:
        letter = rng.choice(sorted(set(word)))
        question = f"How many times does the letter '{letter}' appear in the word '{word}'?"
        return Draft(key=question, prompt=question + " Reply with the number alone.", answer=str(word.count(letter)),
                     difficulty="1", meta={"kind": "count"})
    question = f"Write the word '{word}' backwards."
    return Draft(key=question, prompt=question + " Reply with the reversed word alone.", answer=word[::-1],
                 difficulty="1", meta={"kind": "reverse"})


def generate_reasoning(rng: random.Random) -> Draft:
    return rng.choice((_ages, _ages, _sequence, _letters))(rng)


def reasoning_suite() -> TaskSuite:
    """The ``reasoning`` suite (see the module's docstring)."""

    def make(split: Split, n: int, seed: int) -> list[Task]:
        return draw("reasoning", split, n, seed, generate_reasoning)

    return TaskSuite(name="reasoning", description="Generated age chains, number sequences and letter puzzles; "
                     "no tools; exact match.", make=make, verifier=ExactMatch())


# ---- qa ------------------------------------------------------------------------------------------------


def qa_drafts() -> Iterator[Draft]:
    """Every question the ``qa`` suite can ask."""
    for country, capital, continent in COUNTRIES:
        yield Draft(key=f"capital/{country}", prompt=f"What is the capital of {country}?" + SUFFIX, answer=capital,
                    meta={"kind": "capital"})
        yield Draft(key=f"country/{capital}", prompt=f"{capital} is the capital of which country?" + SUFFIX,
                    answer=country, meta={"kind": "country"})
        yield Draft(key=f"continent/{capital}", prompt=f"On which continent is the country whose capital is "
                    f"{capital}?" + SUFFIX, answer=continent, difficulty="2", meta={"kind": "continent"})
    for element, symbol, number in ELEMENTS:
        yield Draft(key=f"symbol/{element}", prompt=f"What is the chemical symbol of {element}?" + SUFFIX,
                    answer=symbol, meta={"kind": "symbol"})
        yield Draft(key=f"element/{symbol}", prompt=f"Which chemical element has the symbol {symbol}?" + SUFFIX,
                    answer=element, meta={"kind": "element"})
        yield Draft(key=f"number/{element}", prompt=f"What is the atomic number of {element}?" + SUFFIX,
                    answer=str(number), meta={"kind": "number"})
        yield Draft(key=f"symbol-of-number/{number}", prompt=f"What is the chemical symbol of the element with "
                    f"atomic number {number}?" + SUFFIX, answer=symbol, difficulty="2", meta={"kind": "symbol-of-number"})


def qa_suite() -> TaskSuite:
    """The ``qa`` suite: a fixed table, so its splits are finite (about 190 train and 50 held-out questions)."""
    drafts = tuple(qa_drafts())

    def make(split: Split, n: int, seed: int) -> list[Task]:
        return pick("qa", split, n, seed, drafts)

    return TaskSuite(name="qa", description="Short factual questions over a built-in table of countries and "
                     "elements (difficulty 1-2); no tools; exact match.", make=make, verifier=ExactMatch())

"""Built-in task suites: splits (disjoint, deterministic, n honoured), tools and verifiers."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_cli.errors import ForgeError
from forge_cli.tasks.suites import task_suite
from forge_cli.tasks.answers import ExactMatch, NumericMatch, exact_match, extract_number, normalise
from forge_cli.tasks.types import Outcome, Task, TaskSuite, Transcript

SUITES = ["calc", "kv-search", "files", "reasoning", "qa"]
DIFFICULTIES = {"calc": {"1", "2", "3", "4"}, "kv-search": {"1", "2", "3", "4"}, "files": {"1", "2", "3"},
                "reasoning": {"1", "2", "3", "4"}, "qa": {"1", "2"}}


def suite(name: str) -> TaskSuite:
    return task_suite(name)


def said(text: str | None) -> Transcript:
    return Transcript(answer=text)


# ---- the registry --------------------------------------------------------------------------------


def test_every_builtin_suite_is_registered_by_the_builtin_plugin():
    from forge_cli.plugins import get_registry

    registry = get_registry()
    for name in SUITES:
        assert registry.tasks[name].plugin == "forge:tasks"
        assert isinstance(registry.tasks[name].value, TaskSuite)
    assert not [w for w in registry.warnings if "task" in w]


def test_an_unknown_suite_names_the_known_ones():
    with pytest.raises(ForgeError, match=r"no task suite named 'nope' \(registered: calc, calc-1, files, kv-search, qa, reasoning"):
        task_suite("nope")


# ---- splits ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SUITES)
def test_splits_are_disjoint_deterministic_and_sized(name):
    s = suite(name)
    train, heldout = s.make("train", 80, 0), s.make("heldout", 20, 0)
    assert len(train) == 80 and len(heldout) == 20
    assert {t.split for t in train} == {"train"} and {t.split for t in heldout} == {"heldout"}
    assert {t.suite for t in train + heldout} == {name}
    # never overlapping, by id or by question, even with other seeds
    other = s.make("heldout", 20, 7)
    assert not {t.id for t in train} & {t.id for t in heldout + other}
    assert not {(t.prompt, str(t.files)) for t in train} & {(t.prompt, str(t.files)) for t in heldout + other}
    assert len({t.id for t in train}) == 80
    # the same seed gives the same tasks; another seed others; n tasks are a prefix of n + k
    assert s.make("train", 80, 0) == train
    assert s.make("train", 80, 1) != train
    assert s.make("train", 30, 0) == train[:30]
    assert s.make("train", 0, 0) == []
    assert {t.difficulty for t in train + heldout} <= DIFFICULTIES[name]
    if name != "qa":
        assert {t.difficulty for t in train} == DIFFICULTIES[name]


@pytest.mark.parametrize("name", SUITES)
def test_bad_split_requests_are_forge_errors(name):
    s = suite(name)
    with pytest.raises(ForgeError, match="no split 'test'"):
        s.make("test", 1, 0)
    with pytest.raises(ForgeError, match="n must be a whole number"):
        s.make("train", -1, 0)


def test_a_finite_suite_says_how_many_tasks_it_has():
    with pytest.raises(ForgeError, match=r"task suite 'qa' has only \d+ heldout tasks; 10000 were asked for"):
        suite("qa").make("heldout", 10_000, 0)


@pytest.mark.parametrize("name", ["calc", "kv-search", "reasoning", "qa"])
def test_every_task_is_solved_by_its_answer_and_not_by_garbage(name, tmp_path):
    s = suite(name)
    for task in s.make("train", 40, 3) + s.make("heldout", 10, 3):
        assert s.verifier.verify(task, tmp_path, said(str(task.answer))).solved, task
        assert s.verifier.verify(task, tmp_path, said(f"The answer is {task.answer}.")).solved, task
        for garbage in (None, "", "I do not know", "The answer is: 987654321-ZZ"):
            outcome = s.verifier.verify(task, tmp_path, said(garbage))
            assert outcome.score == 0.0 and outcome.reason, (task, garbage)


def test_tool_free_suites_offer_no_tools_and_agent_suites_do(tmp_path):
    assert [t.name for t in suite("calc").tools(suite("calc").make("train", 1, 0)[0], tmp_path)] == ["calculator"]
    kv = suite("kv-search")
    assert [t.name for t in kv.tools(kv.make("train", 1, 0)[0], tmp_path)] == ["search", "open"]
    files = suite("files")
    assert [t.name for t in files.tools(files.make("train", 1, 0)[0], tmp_path)] == ["read_file", "write_file", "list_files"]
    for name in ("reasoning", "qa"):
        s = suite(name)
        assert tuple(s.tools(s.make("train", 1, 0)[0], tmp_path)) == ()


# ---- answers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, want", [
    ("42", 42), ("The answer is 42.", 42), ("Answer: 42", 42), ("answer:42\nbecause 6*7", 42),
    ("I computed 6 * 7 = 42", 42), ("The answer is 42 (after 2 calls)", 42), ("1,234", 1234),
    ("The total is 1,234,567.", 1234567), ("-17", -17), ("it is -3.5", -3.5), ("\\boxed{12}", 12),
    ("2e3", 2000), ("Final Answer: **7**", 7), ("42.0", 42),
])
def test_numbers_are_read_from_answers(text, want):
    assert extract_number(text) == want


@pytest.mark.parametrize("text", ["", "no idea", "forty-two", "x1", "answer: none"])
def test_answers_without_a_number_have_none(text):
    assert extract_number(text) is None


@given(value=st.integers(-10**9, 10**9), template=st.sampled_from([
    "{v}", "The answer is {v}.", "Answer: {v}", "So {a} + {b} gives {v}", "**{v}**", "result = {v}\n"]),
    a=st.integers(0, 99), b=st.integers(0, 99))
def test_the_number_of_an_answer_is_the_number_written(value, template, a, b):
    assert extract_number(template.format(v=value, a=a, b=b)) == value


@given(word=st.text(st.characters(whitelist_categories=("L", "N"), max_codepoint=0x24F), min_size=1, max_size=12)
       .filter(lambda w: "answer" not in w.casefold()),
       marker=st.sampled_from(["The answer is: ", "answer: ", "Answer is ", "Final answer is : ", "ANSWER IS:", "answer:"]),
       before=st.sampled_from(["", "I looked it up.\n", "After 3 searches, "]), after=st.sampled_from(["", ".", "!", " "]))
def test_an_exact_answer_after_any_marker_form_matches(word, marker, before, after):
    """"The answer is: Finland" is Finland: the marker takes its colon with it in every form."""
    ok, why = exact_match(f"{before}{marker}{word}{after}", word)
    assert ok, why
    assert not exact_match(f"{before}{marker}{word}x{after}", word)[0]


def test_numeric_verifier_right_wrong_and_garbled(tmp_path):
    task = Task(id="t", suite="calc", prompt="?", answer=1508164)
    v = NumericMatch()
    assert v.verify(task, tmp_path, said("The answer is 1,508,164.")).solved
    assert v.verify(task, tmp_path, said("1508164.0")).solved
    assert v.verify(task, tmp_path, said("The answer is 1508165.")) == Outcome(0.0, "1508165 is not 1508164")
    assert not v.verify(task, tmp_path, said("1508164.0000001")).solved
    half = Task(id="h", suite="calc", prompt="?", answer=2.5)
    assert v.verify(half, tmp_path, said("2.5000001")).solved and not v.verify(half, tmp_path, said("2.6")).solved
    assert v.verify(task, tmp_path, said("one million")) == Outcome(0.0, "the answer holds no number")
    assert v.verify(task, tmp_path, said(None)) == Outcome(0.0, "no answer")


@pytest.mark.parametrize("text, want", [
    ("Paris", "paris"), ("  PARIS. ", "paris"), ("paris!?", "paris"), ('"Paris"', "paris"), ("`Paris`", "paris"),
    ("**Paris**.", "paris"), ("New   Delhi", "new delhi"), ("New\nDelhi", "new delhi"), ("-5.", "-5"),
])
def test_normalise(text, want):
    assert normalise(text) == want


@given(st.text(alphabet="abcXYZ 019-", min_size=1, max_size=12), st.sampled_from(["", ".", "!", " ", "?", ". "]),
       st.sampled_from(["", " ", "\n"]))
def test_exact_match_ignores_case_whitespace_and_trailing_punctuation(word, tail, lead):
    task = Task(id="t", suite="qa", prompt="?", answer=word)
    expected = ExactMatch().verify(task, Path("."), said(lead + word.upper() + tail))
    assert expected.solved == bool(normalise(word))


def test_exact_match_right_wrong_garbled_and_alternatives(tmp_path):
    v = ExactMatch()
    task = Task(id="t", suite="qa", prompt="?", answer="Addis Ababa")
    assert v.verify(task, tmp_path, said("Final answer: addis  ababa.")).solved
    assert not v.verify(task, tmp_path, said("Addis")).solved
    assert not v.verify(task, tmp_path, said("Nairobi")).solved
    assert v.verify(task, tmp_path, said("   ")) == Outcome(0.0, "empty answer")
    assert v.verify(task, tmp_path, said(None)) == Outcome(0.0, "no answer")
    either = Task(id="u", suite="qa", prompt="?", answer=["USA", "United States"])
    assert v.verify(either, tmp_path, said("united states")).solved and v.verify(either, tmp_path, said("usa")).solved


# ---- generated tasks are right ------------------------------------------------------------------------


@given(seed=st.integers(0, 2**32))
@settings(max_examples=150)
def test_calc_answers_are_the_arithmetic_of_the_question(seed):
    from forge_cli.tasks.calc import generate
    from forge_cli.tasks.calculator import evaluate

    draft = generate(random.Random(seed))
    question = draft.key
    if draft.meta["form"] == "expression":
        expression = question.removeprefix("What is ").removesuffix("?")
        assert len(re.findall(r" [-+*/] ", expression)) == draft.meta["operations"]
        assert evaluate(expression) == draft.answer
    else:
        values: dict[str, float] = {}
        *lets, last = question.split(". ")
        for let in lets:
            name, expression = re.fullmatch(r"Let (\w) = (.+)", let.removesuffix(".")).groups()
            values[name] = evaluate(re.sub(r"\b[a-h]\b", lambda m: str(values[m.group()]), expression))
        final = re.fullmatch(r"What is (.+)\?", last).group(1)
        assert len(lets) + 1 == draft.meta["operations"]
        assert evaluate(re.sub(r"\b[a-h]\b", lambda m: str(values[m.group()]), final)) == draft.answer
    assert isinstance(draft.answer, int) and draft.difficulty == str(draft.meta["operations"])


def test_reasoning_answers_are_right():
    from forge_cli.tasks.puzzles import generate_reasoning

    for seed in range(300):
        draft = generate_reasoning(random.Random(seed))
        kind, q = draft.meta["kind"], draft.key
        if kind == "ages":
            ages: dict[str, int] = {}
            statements, _, asked = q.partition(" How old is ")
            pending = [f.rstrip(".") for f in statements.split(". ")]
            target = asked.removesuffix("?")
            for _ in range(len(pending)):
                for fact in list(pending):
                    if m := re.fullmatch(r"(\w+) is (\d+) years old", fact):
                        ages[m.group(1)] = int(m.group(2))
                    elif (m := re.fullmatch(r"(\w+) is (\d+) years (older|younger) than (\w+)", fact)) and m.group(4) in ages:
                        sign = 1 if m.group(3) == "older" else -1
                        ages[m.group(1)] = ages[m.group(4)] + sign * int(m.group(2))
                    else:
                        continue
                    pending.remove(fact)
            assert not pending, q
            assert str(ages[target]) == draft.answer
            assert draft.difficulty == str(len(ages) - 1)
        elif kind in ("arithmetic", "geometric"):
            terms = [int(x) for x in re.search(r"sequence (.+), \.\.\.", q).group(1).split(", ")]
            step = terms[1] - terms[0] if kind == "arithmetic" else None
            want = terms[-1] + step if step is not None else terms[-1] * (terms[1] // terms[0])
            assert str(want) == draft.answer
        elif kind == "count":
            letter, word = re.search(r"letter '(.)' appear in the word '(\w+)'", q).groups()
            assert draft.answer == str(word.count(letter)) and int(draft.answer) >= 1
        else:
            assert draft.answer == re.search(r"word '(\w+)'", q).group(1)[::-1]


def test_qa_answers_come_from_the_table():
    from forge_cli.tasks.puzzles import COUNTRIES, ELEMENTS

    capitals = {c: cap for c, cap, _ in COUNTRIES}
    symbols = {e: s for e, s, _ in ELEMENTS}
    by_number = {n: s for _, s, n in ELEMENTS}
    s = suite("qa")
    tasks = s.make("train", 150, 0)
    for task in tasks:
        kind = task.meta["kind"]
        if kind == "capital":
            assert capitals[re.search(r"capital of (.+)\?", task.prompt).group(1)] == task.answer
        elif kind == "symbol":
            assert symbols[re.search(r"symbol of (\w+)\?", task.prompt).group(1)] == task.answer
        elif kind == "symbol-of-number":
            assert by_number[int(re.search(r"atomic number (\d+)\?", task.prompt).group(1))] == task.answer
            assert task.difficulty == "2"

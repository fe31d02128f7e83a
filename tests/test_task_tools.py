"""The tools of the built-in suites: the calculator, kv-search's search/open, and the confined file tools."""

from __future__ import annotations

import ast
import os
import posixpath
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_cli.errors import ForgeError
from forge_cli.tasks.suites import task_suite
from forge_cli.tasks.calculator import CalculatorError, calculate, evaluate, format_number
from forge_cli.tasks.types import Task, Transcript
from forge_cli.tasks.workdir import FilesMatch, confine, file_tools, normalise_file, seed_workdir

# ---- calculator ---------------------------------------------------------------------------------------


def expressions(max_leaves: int = 12) -> st.SearchStrategy[str]:
    number = st.one_of(st.integers(0, 10**6).map(str), st.floats(0, 1e6, allow_nan=False).map(repr),
                       st.integers(0, 99).map(lambda i: f"{i}.5"))
    small = st.integers(0, 4).map(str)

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        binary = st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "//", "%"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})")
        power = st.tuples(inner, small).map(lambda t: f"({t[0]}) ** {t[1]}")
        unary = st.tuples(st.sampled_from(["-", "+"]), inner).map(lambda t: f"{t[0]}{t[1]}")
        return st.one_of(binary, power, unary)

    return st.recursive(number, extend, max_leaves=max_leaves)


def python(node: ast.expr) -> object:
    """Python's own value of an expression tree (the plain computation), or the exception it raises."""
    try:
        return eval(compile(ast.fix_missing_locations(ast.Expression(node)), "<expr>", "eval"), {"__builtins__": {}})
    except (ZeroDivisionError, OverflowError) as exc:
        return exc


@given(expressions())
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_the_calculator_is_pythons_arithmetic(expression):
    tree = ast.parse(expression, mode="eval").body
    want = python(tree)
    steps = [python(node) for node in ast.walk(tree) if isinstance(node, (ast.BinOp, ast.UnaryOp))]
    huge = any(isinstance(v, int) and abs(v) > 10**100 for v in steps)
    if isinstance(want, Exception) or huge or any(isinstance(v, complex) for v in steps):
        with pytest.raises(CalculatorError, match="division by zero|too large|complex"):
            evaluate(expression)
        return
    got = evaluate(expression)
    assert type(got) is type(want)
    assert got == want or (got != got and want != want)  # NaN is NaN


@given(st.integers(-10**6, 10**6), st.integers(-10**6, 10**6), st.sampled_from(["+", "-", "*"]))
def test_caret_is_power_and_results_print_plainly(a, b, op):
    assert evaluate(f"{a} {op} {b}") == eval(f"{a} {op} {b}")
    assert calculate(f"{a} {op} {b}") == str(eval(f"{a} {op} {b}"))
    assert evaluate(f"{abs(a) % 50} ^ 3") == (abs(a) % 50) ** 3


@pytest.mark.parametrize("value, text", [(2.0, "2"), (7 / 2, "3.5"), (-0.0, "0"), (1e20, "1e+20"), (10**30, str(10**30)),
                                         (float("inf"), "inf"), (0.1 + 0.2, "0.30000000000000004")])
def test_format_number(value, text):
    assert format_number(value) == text


@pytest.mark.parametrize("expression, message", [
    ("__import__('os').system('true')", "unsupported"), ("x + 1", "unsupported"), ("abs(-3)", "unsupported"),
    ("(1).real", "unsupported"), ("'a' * 3", "is not a number"), ("True + 1", "is not a number"),
    ("1 < 2", "unsupported"), ("lambda: 1", "unsupported"), ("[1, 2]", "unsupported"), ("1j * 2", "is not a number"),
    ("1 / 0", "division by zero"), ("5 % 0", "division by zero"), ("0 ** -1", "division by zero"),
    ("(-8) ** 0.5", "complex"), ("9 ** 9 ** 9", "too large"), ("10 ** 1001", "too large"), ("2.0 ** 5000", "too large"),
    ("10 ** 99 * 10 ** 99", "too large"), ("", "empty"), ("1 +", "cannot parse"), ("1" * 501, "longer than"),
    ("1; 2", "cannot parse"), ("import os", "cannot parse"),
])
def test_the_calculator_refuses(expression, message):
    with pytest.raises(CalculatorError, match=message):  # "too large": refused before it is computed
        evaluate(expression)


def test_deep_but_short_expressions_are_computed_not_crashed():
    assert evaluate("(" * 150 + "1" + ")" * 150) == 1
    assert evaluate("-" * 499 + "1") == -1


def test_the_calculator_tool_reads_its_arguments(tmp_path):
    suite = task_suite("calc")
    (tool,) = suite.tools(suite.make("train", 1, 0)[0], tmp_path)
    assert tool.schema()["function"]["parameters"]["required"] == ["expression"]
    assert tool.run({"expression": "(347 * 29) - 1234"}) == "8829"
    assert tool.run("6 / 3") == "2"
    with pytest.raises(ForgeError, match="calculator needs"):
        tool.run({"expr": "1"})
    with pytest.raises(CalculatorError):
        tool.run({"expression": "open('x')"})


# ---- kv-search -------------------------------------------------------------------------------------------


def solve_kv(task: Task) -> tuple[str, int, int]:
    """Answer a kv-search task through its tools alone, the way an agent would: (code, calls, words read)."""
    search, open_ = task_suite("kv-search").tools(task, Path("."))
    entity = re.search(r"of (?:the partner of )*([a-z]+-[a-z]+)\?", task.prompt).group(1)
    calls, words = 0, 0
    for hop in range(int(task.meta["hops"])):
        hits = search.run({"query": entity})
        calls, words = calls + 1, words + len(hits.split())
        doc_id = re.search(rf"^(doc-\d+): Entry: {entity}$", hits, re.M).group(1)
        text = open_.run({"doc_id": doc_id})
        calls, words = calls + 1, words + len(text.split())
        assert len(re.findall(r"\b[A-Z]{2}-\d{4}\b", text)) == 1
        code = re.search(rf"The code of {entity} is ([A-Z]{{2}}-\d{{4}})\.", text).group(1)
        entity = re.search(rf"The partner of {entity} is ([a-z]+-[a-z]+)\.", text).group(1)
    return code, calls, words


def test_kv_search_is_solved_through_its_tools_and_its_observations_are_long():
    suite = task_suite("kv-search")
    seen_hops = set()
    for task in suite.make("train", 24, 5) + suite.make("heldout", 8, 5):
        code, calls, words = solve_kv(task)
        assert code == task.answer
        hops = int(task.difficulty)
        seen_hops.add(hops)
        assert calls == 2 * hops and words >= 300 * hops
        assert suite.verifier.verify(task, Path("."), Transcript(answer=code)).solved
    assert seen_hops == {1, 2, 3, 4}


def test_kv_search_corpora_are_deterministic_and_filler_is_configurable():
    from forge_cli.tasks.kvsearch import ADJECTIVES, ANIMALS, FILLER, build_corpus, corpus_of, kv_search_suite

    assert not set(FILLER) & (set(ADJECTIVES) | set(ANIMALS))
    task = task_suite("kv-search").make("train", 1, 0)[0]
    build_corpus.cache_clear()
    again = corpus_of(task)
    assert again == corpus_of(task) and again is not None
    for doc in again.documents:
        assert 300 <= len(doc.text.split()) - 14 <= 600 + 15  # 'Entry: x', two facts, whole sentences
    short = kv_search_suite(max_hops=2, documents=6, filler_words=(10, 20))
    tasks = short.make("train", 5, 0)
    assert {int(t.difficulty) for t in tasks} <= {1, 2}
    for t in tasks:
        assert all(len(d.text.split()) < 60 for d in corpus_of(t).documents)
        assert solve_kv(t)[0] == t.answer
    with pytest.raises(ForgeError, match="kv-search: need"):
        kv_search_suite(max_hops=4, documents=5)


def test_kv_search_tools_refuse_bad_arguments():
    task = task_suite("kv-search").make("train", 1, 0)[0]
    search, open_ = task_suite("kv-search").tools(task, Path("."))
    assert search.run({"query": "zebra unicorn"}) == "no documents match"
    with pytest.raises(ForgeError, match="there is no document 'doc-xyz'"):
        open_.run({"doc_id": "doc-xyz"})
    for bad in ({}, {"query": ""}, {"query": 3}, None):
        with pytest.raises(ForgeError, match="non-empty string"):
            search.run(bad)
    with pytest.raises(ForgeError, match="not a kv-search task"):
        task_suite("kv-search").tools(Task(id="x", suite="kv-search", prompt="?"), Path("."))


# ---- confined file tools ----------------------------------------------------------------------------------


@pytest.fixture
def box(tmp_path):
    """A work directory with a sibling folder outside it (that must stay untouched)."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    return work, outside


@pytest.mark.parametrize("path", ["../outside/secret.txt", "/etc/passwd", "a/../../outside/x", "..", "../work2/x",
                                  "link/secret.txt", "filelink", "dangling", "a/../link/new.txt"])
def test_file_tools_refuse_paths_outside_the_workdir(box, path):
    work, outside = box
    (work / "link").symlink_to(outside)
    (work / "filelink").symlink_to(outside / "secret.txt")
    (work / "dangling").symlink_to(outside / "not-yet.txt")
    read, write, listing = file_tools(work)
    for call in (lambda: read.run({"path": path}), lambda: write.run({"path": path, "content": "pwned"}),
                 lambda: listing.run({"path": path})):
        with pytest.raises(ForgeError, match="outside the work directory"):
            call()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret"


@given(st.lists(st.sampled_from(["..", ".", "a", "b", "c.txt", ""]), min_size=1, max_size=6), st.booleans())
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_confine_is_the_plain_path_computation(tmp_path, parts, absolute):
    root = os.path.realpath(tmp_path)
    path = "/".join(parts)
    if absolute:
        path = root + "/" + path
    if not path.strip():
        with pytest.raises(ForgeError):
            confine(tmp_path, path)
        return
    plain = posixpath.normpath(posixpath.join(root, path.strip()))
    inside = plain == root or plain.startswith(root + "/")
    if inside:
        assert str(confine(tmp_path, path)) == plain
    else:
        with pytest.raises(ForgeError, match="outside"):
            confine(tmp_path, path)


def test_file_tools_read_write_and_list(box):
    work, _ = box
    read, write, listing = file_tools(work)
    assert listing.run({}) == "(no files)"
    assert write.run({"path": "notes/a.txt", "content": "hello\n"}) == "wrote 6 characters to notes/a.txt"
    assert write.run({"path": str(work / "b.txt"), "content": "absolute inside is fine"})
    assert read.run({"path": "notes/a.txt"}) == "hello\n" and read.run("notes/./a.txt") == "hello\n"
    assert listing.run({"path": "."}) == "b.txt\nnotes/a.txt"
    assert listing.run({"path": "notes"}) == "notes/a.txt"
    with pytest.raises(ForgeError, match="no file 'missing.txt'"):
        read.run({"path": "missing.txt"})
    with pytest.raises(ForgeError, match="is a folder"):
        write.run({"path": "notes", "content": "x"})
    with pytest.raises(ForgeError, match="content must be a string"):
        write.run({"path": "c.txt", "content": 3})
    with pytest.raises(ForgeError, match="needs the argument 'content'"):
        write.run({"path": "c.txt"})
    with pytest.raises(ForgeError, match="NUL"):
        read.run({"path": "a\x00b"})
    (work / "big.txt").write_text("x" * 70_000)
    assert read.run({"path": "big.txt"}).endswith("[... cut at 64000 characters]")


def test_files_verifier_right_wrong_partial_and_tolerant(tmp_path):
    task = Task(id="t", suite="files", prompt="?", answer={"files": {"a.txt": "one\ntwo\n", "b/c.txt": "3\n"}})
    v = FilesMatch()
    out = v.verify(task, tmp_path, Transcript(answer=None))
    assert out.score == 0.0 and "a.txt is missing" in out.reason and "b/c.txt is missing" in out.reason
    (tmp_path / "a.txt").write_text("one  \r\ntwo\r\n\r\n")
    out = v.verify(task, tmp_path, Transcript(answer=None))
    assert out.score == 0.5 and out.reason == "b/c.txt is missing"
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "c.txt").write_text("4\n")
    assert v.verify(task, tmp_path, Transcript(answer=None)).reason == "b/c.txt differs"
    (tmp_path / "b" / "c.txt").write_text("3")
    assert v.verify(task, tmp_path, Transcript(answer=None)).solved
    assert normalise_file("a \r\nb\t\n\n\n") == "a\nb"
    with pytest.raises(ForgeError, match="names no expected files"):
        v.verify(Task(id="u", suite="files", prompt="?"), tmp_path, Transcript(answer=None))


def test_every_files_task_is_solved_by_writing_its_answer_and_not_by_doing_nothing(tmp_path):
    suite = task_suite("files")
    kinds = set()
    for i, task in enumerate(suite.make("train", 40, 2) + suite.make("heldout", 10, 2)):
        kinds.add(task.meta["kind"])
        workdir = tmp_path / str(i)
        workdir.mkdir()
        seed_workdir(task, workdir)
        untouched = suite.verifier.verify(task, workdir, Transcript(answer=None))
        assert untouched.score < 1.0, task
        _, write, _ = suite.tools(task, workdir)
        for path, text in task.answer["files"].items():
            write.run({"path": path, "content": text})
        assert suite.verifier.verify(task, workdir, Transcript(answer=None)).solved, task
        first = next(iter(task.answer["files"]))
        write.run({"path": first, "content": "garbage\n"})
        assert not suite.verifier.verify(task, workdir, Transcript(answer=None)).solved
    assert kinds == {"create", "edit", "sum", "upper", "sort"}

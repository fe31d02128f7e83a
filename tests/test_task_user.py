"""A user's tasks (JSONL + a verifier reference) and third-party suites through the register_tasks hook."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from forge_cli.errors import ForgeError
from forge_cli.tasks.suites import task_suite
from forge_cli.tasks.user import load_user_suite
from forge_cli.tasks.types import Outcome, TaskSuite, Transcript

CHECKS = '''
from forge_cli.tasks.types import Outcome

def as_bool(task, workdir, transcript):
    return transcript.answer == task.answer

def as_float(task, workdir, transcript):
    return 0.25 if transcript.answer else 0.0

def as_outcome(task, workdir, transcript):
    return Outcome(1.0 if (workdir / "out.txt").exists() else 0.0, "looked at out.txt")

def too_big(task, workdir, transcript):
    return 1.5

def not_a_score(task, workdir, transcript):
    return "yes"

def nan(task, workdir, transcript):
    return float("nan")

def one_argument(task):
    return True

class ByClass:
    def verify(self, task, workdir, transcript):
        return transcript.answer is not None

NOT_CALLABLE = 3
'''


@pytest.fixture
def checks(tmp_path, monkeypatch):
    folder = tmp_path / "mods"
    folder.mkdir()
    (folder / "user_checks.py").write_text(CHECKS)
    monkeypatch.syspath_prepend(str(folder))
    yield "user_checks"
    sys.modules.pop("user_checks", None)


def write(tmp_path: Path, lines: list[object], name: str = "my_tasks.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def test_a_jsonl_file_is_a_suite_with_its_ids_splits_and_default_exact_match(tmp_path):
    rows = [{"id": f"q{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i), "difficulty": i % 3} for i in range(60)]
    rows += [{"id": "fixed-h", "prompt": "held", "answer": "x", "split": "heldout"},
             {"id": "fixed-t", "prompt": "trained", "answer": "y", "split": "train"}]
    suite = load_user_suite(write(tmp_path, rows))
    assert isinstance(suite, TaskSuite) and suite.name == "my-tasks"
    suite.validate()
    train, heldout = suite.make("train", 5, 0), suite.make("heldout", 3, 0)
    assert {t.suite for t in train + heldout} == {"my-tasks"} and {t.split for t in heldout} == {"heldout"}
    held = [r["id"] for r in rows if r.get("split", "heldout" if _held(r["id"]) else "train") == "heldout"]
    every_train = suite.make("train", len(rows) - len(held), 0)
    every_held = suite.make("heldout", len(held), 0)
    assert {t.id for t in every_held} == set(held)
    assert {t.id for t in every_train} | {t.id for t in every_held} == {r["id"] for r in rows}
    assert not {t.id for t in every_train} & {t.id for t in every_held}
    assert "fixed-h" in {t.id for t in every_held} and "fixed-t" in {t.id for t in every_train}
    assert 5 <= len(every_held) <= 25  # one in five, by a hash of the id
    assert suite.make("train", 5, 0) == train and suite.make("train", 5, 1) != train
    task = next(t for t in every_train if t.id == "q7")
    assert task.answer == "14" and task.difficulty == "1" and task.prompt == "What is 7 + 7?"
    assert suite.verifier.verify(task, tmp_path, Transcript(answer="Answer: 14.")).solved
    assert not suite.verifier.verify(task, tmp_path, Transcript(answer="15")).solved
    with pytest.raises(ForgeError, match=r"task suite 'my-tasks' has only \d+ heldout tasks; 999 were asked for"):
        suite.make("heldout", 999, 0)
    assert tuple(suite.tools(task, tmp_path)) == ()


def _held(task_id: str) -> bool:
    from forge_cli.tasks.splits import split_of

    return split_of("my-tasks", task_id) == "heldout"


def test_files_seed_the_workdir_and_give_file_tools(tmp_path, checks):
    path = write(tmp_path, [{"id": "f1", "prompt": "copy", "files": {"in/a.txt": "hi"}, "split": "train"}])
    suite = load_user_suite(path, verifier_ref=f"{checks}:as_outcome", name="copying")
    (task,) = suite.make("train", 1, 0)
    assert task.files == {"in/a.txt": "hi"}
    assert [t.name for t in suite.tools(task, tmp_path)] == ["read_file", "write_file", "list_files"]
    assert suite.verifier.verify(task, tmp_path, Transcript(answer=None)) == Outcome(0.0, "looked at out.txt")
    (tmp_path / "out.txt").write_text("x")
    assert suite.verifier.verify(task, tmp_path, Transcript(answer=None)).solved


@pytest.mark.parametrize("ref, answer, score", [
    ("as_bool", "42", 1.0), ("as_bool", "41", 0.0), ("as_float", "x", 0.25), ("as_float", None, 0.0),
    ("ByClass", "x", 1.0), ("ByClass", None, 0.0),
])
def test_verifier_references_return_outcomes(tmp_path, checks, ref, answer, score):
    suite = load_user_suite(write(tmp_path, [{"id": "a", "prompt": "p", "answer": "42", "split": "train"}]),
                            verifier_ref=f"{checks}:{ref}", name="refs")
    (task,) = suite.make("train", 1, 0)
    outcome = suite.verifier.verify(task, tmp_path, Transcript(answer=answer))
    assert isinstance(outcome, Outcome) and outcome.score == score


@pytest.mark.parametrize("ref, message", [
    ("too_big", r"gave the score 1.5; scores are in \[0, 1\]"), ("nan", "gave the score nan"),
    ("not_a_score", "returned str; it must return an Outcome, a float in"),
])
def test_a_verifier_that_returns_nonsense_is_a_forge_error(tmp_path, checks, ref, message):
    suite = load_user_suite(write(tmp_path, [{"id": "a", "prompt": "p", "split": "train"}]),
                            verifier_ref=f"{checks}:{ref}", name="bad")
    with pytest.raises(ForgeError, match=message):
        suite.verifier.verify(suite.make("train", 1, 0)[0], tmp_path, Transcript(answer="x"))


@pytest.mark.parametrize("ref, message", [
    ("user_checks", "is not a 'package.module:function' reference"),
    ("no_such_module_xyz:verify", r"does not resolve \(ModuleNotFoundError"),
    ("user_checks:missing", r"does not resolve \(AttributeError"),
    ("user_checks:NOT_CALLABLE", "neither a function nor an object with verify"),
    ("user_checks:one_argument", r"must take \(task, workdir, transcript\)"),
])
def test_bad_verifier_references_are_one_line_errors(tmp_path, checks, ref, message):
    with pytest.raises(ForgeError, match=message) as info:
        load_user_suite(write(tmp_path, [{"id": "a", "prompt": "p"}]), verifier_ref=ref, name="x")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("line, message", [
    ("{not json", "not JSON"), ("[1, 2]", "a task is a JSON object, not list"), ('{"prompt": "p"}', "'id' must be"),
    ('{"id": "a"}', "'prompt' must be"), ('{"id": "", "prompt": "p"}', "'id' must be a non-empty string"),
    ('{"id": 3, "prompt": "p"}', "'id' must be"), ('{"id": "b", "prompt": "p", "split": "test"}', "'split' must be"),
    ('{"id": "b", "prompt": "p", "colour": 1}', r"unknown field\(s\) colour"),
    ('{"id": "b", "prompt": "p", "files": ["a"]}', "'files' must be an object"),
    ('{"id": "b", "prompt": "p", "files": {"../x": "y"}}', "not a relative path inside the work directory"),
    ('{"id": "b", "prompt": "p", "files": {"/etc/x": "y"}}', "not a relative path inside the work directory"),
    ('{"id": "b", "prompt": "p", "difficulty": [1]}', "'difficulty' must be a string or a number"),
    ('{"id": "a", "prompt": "again"}', "the id 'a' is already used on line 1"),
])
def test_a_bad_line_is_an_error_naming_its_line_number(tmp_path, line, message):
    path = write(tmp_path, [{"id": "a", "prompt": "p"}, "", line, {"id": "z", "prompt": "p"}])
    with pytest.raises(ForgeError, match=message) as info:
        load_user_suite(path)
    assert str(info.value).startswith(f"{path}:3: ")


def test_files_that_cannot_be_suites(tmp_path):
    with pytest.raises(ForgeError, match="cannot read the task file"):
        load_user_suite(tmp_path / "missing.jsonl")
    with pytest.raises(ForgeError, match="holds no tasks"):
        load_user_suite(write(tmp_path, ["", "  "], name="empty.jsonl"))
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ForgeError, match="cannot read the task file"):
        load_user_suite(tmp_path / "bin.jsonl")
    with pytest.raises(ForgeError, match="task suite name 'Bad Name' is not valid"):
        load_user_suite(write(tmp_path, [{"id": "a", "prompt": "p"}]), name="Bad Name")


# ---- third parties, through the hook ----------------------------------------------------------------------

PLUGIN = '''
from pathlib import Path
from forge_cli import hookimpl
from forge_cli.tasks.user import load_user_suite
from forge_cli.tasks.answers import ExactMatch
from forge_cli.tasks.types import Task, TaskSuite

HERE = Path(__file__).parent

@hookimpl
def register_tasks(register):
    register(TaskSuite(name="third", description="one task", verifier=ExactMatch(),
                       make=lambda split, n, seed: [Task(id="t", suite="third", prompt="say hi", answer="hi", split=split)][:n]))
    register(load_user_suite(HERE / "theirs.jsonl", name="theirs"))
    register({"name": "a dict is not a suite"})
    register(TaskSuite(name="calc", description="a second calc", verifier=ExactMatch(), make=lambda s, n, seed: []))
    register(TaskSuite(name="no-verifier", description="x", verifier=object(), make=lambda s, n, seed: []))
'''


def test_third_party_suites_register_through_the_hook(fake_dist, tmp_path):
    from forge_cli.plugins import get_registry

    site = fake_dist("task-plugin", {"task_plugin_mod": PLUGIN}, {"tasks": "task_plugin_mod"})
    (site / "theirs.jsonl").write_text(json.dumps({"id": "u1", "prompt": "p", "answer": "a", "split": "train"}) + "\n")
    registry = get_registry()
    assert registry.tasks["third"].plugin == "task-plugin"
    assert task_suite("third").make("train", 1, 0)[0].answer == "hi"
    assert [t.id for t in task_suite("theirs").make("train", 1, 0)] == ["u1"]
    text = "\n".join(registry.warnings)
    assert "plugin 'task-plugin': register_tasks got dict, expected TaskSuite; ignored" in text
    assert "task suite 'calc' is already registered by plugin 'forge:tasks'; ignored" in text
    assert "task suite 'no-verifier': its verifier has no verify(task, workdir, transcript)" in text
    assert registry.tasks["calc"].plugin == "forge:tasks"
    assert registry.plugins["task-plugin"].registered["tasks"] == ["third", "theirs"]

"""The ``swe-mini`` suite: generated repositories whose tests really fail as generated and pass once
fixed, splits, difficulty labels, the in-sandbox verifier (unchanged tests, all passing), its tools,
the demo policy, and a scripted rollout from the CLI that ends in verified successes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_cli.errors import ForgeError
from forge_cli.tasks.suites import task_suite
from forge_cli.tasks.swe_mini import UnitTests, unittest_command
from forge_cli.tasks.swe_units import UNITS, plant, render, repair
from forge_cli.tasks.types import SandboxVerifier, Transcript, verify_outcome

NONE = Transcript(answer=None)
seeds = st.integers(min_value=0, max_value=2**31)


def suite():
    return task_suite("swe-mini")


def write(task, root: Path, files: dict[str, str] | None = None) -> Path:
    for path, text in (files or task.files).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def run_tests(task, root: Path) -> subprocess.CompletedProcess:
    """The task's tests, run for real by the host's python3 (what the verifier runs in the sandbox)."""
    return subprocess.run(unittest_command(task.answer["test_modules"]), cwd=root, capture_output=True, text=True,
                          timeout=60)


# ---- generation and splits --------------------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(seed=seeds)
def test_generation_is_deterministic_and_the_splits_disjoint(seed):
    s = suite()
    train, heldout = s.make("train", 6, seed), s.make("heldout", 3, seed)
    assert train == s.make("train", 6, seed) and heldout == s.make("heldout", 3, seed)
    assert s.make("train", 5, seed) == train[:5]  # n tasks are a prefix of n + 1
    assert {t.split for t in train} == {"train"} and {t.split for t in heldout} == {"heldout"}
    assert not {t.id for t in train} & {t.id for t in heldout}
    assert not {json.dumps(t.files, sort_keys=True) for t in train} & {json.dumps(t.files, sort_keys=True) for t in heldout}
    other = s.make("heldout", 3, seed + 1)
    assert not {t.id for t in train} & {t.id for t in other}


def test_tasks_vary_and_carry_difficulty_labels():
    tasks = suite().make("train", 120, 0)
    assert {t.difficulty for t in tasks} == {"1", "2", "3", "4"}
    assert {t.meta["modules"] for t in tasks} == {1, 2, 3}
    assert {t.meta["names_function"] for t in tasks} == {True, False}
    kinds = {k for t in tasks for k in t.meta["bugs"]}
    assert kinds == {"off-by-one", "wrong-operator", "wrong-comparison", "swapped-arguments", "missing-case"}
    for t in tasks:
        m = t.meta
        assert t.difficulty == str(1 + (m["lines_to_change"] > 1) + (m["modules"] > 1) + (not m["names_function"]))
        assert m["files"] == sum(p.endswith(".py") for p in t.files)
        assert ("tests/test_api.py" in t.files) == (not m["names_function"])
        package = t.answer["package"]
        assert f"package `{package}`" in t.prompt and "FAILED (" in t.prompt and "Do not change the tests" in t.prompt
        assert set(t.answer["fix"]) <= {p for p in t.files if p.startswith(f"{package}/")}


def test_every_catalogue_bug_is_planted_once_and_repaired_exactly():
    for unit in UNITS:
        for name in unit.names:
            correct = render(unit, name)
            compile(correct, unit.key, "exec")
            for bug in unit.bugs:
                buggy = plant(correct, bug)
                assert buggy != correct
                compile(buggy, unit.key, "exec")
                fixed, edits = repair(buggy)
                assert fixed == correct and len(edits) == 1 and edits[0][0]  # an edit never has empty old text
                assert buggy.count(edits[0][0]) == 1 and buggy.replace(edits[0][0], edits[0][1]) == correct
            assert repair(correct) == (correct, [])


# ---- the tests really fail, and really pass once fixed ----------------------------------------------


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=seeds, split=st.sampled_from(["train", "heldout"]))
def test_generated_tests_fail_and_the_reference_fix_makes_them_pass(seed, split, tmp_path_factory):
    task = suite().make(split, 1, seed)[0]
    root = write(task, tmp_path_factory.mktemp("repo"))
    before = run_tests(task, root)
    assert before.returncode != 0 and "FAILED (" in before.stderr, before.stderr
    # the prompt reports what the real run reports: each failing test's header and its error's type
    for line in task.prompt.splitlines():
        if line.startswith(("FAIL: ", "ERROR: ", "Ran ", "FAILED (")):
            assert line in before.stderr, (line, before.stderr)
        if line.startswith("AssertionError: "):
            assert line in before.stderr, (line, before.stderr)
    write(task, root, task.answer["fix"])
    after = run_tests(task, root)
    assert after.returncode == 0 and f"Ran {task.answer['test_count']} tests" in after.stderr, after.stderr
    # and the demo policy's repair gives exactly the reference fix
    for path, good in task.answer["fix"].items():
        assert repair(task.files[path])[0] == good


# ---- the verifier -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tasks():
    return suite().make("train", 4, 3)


def test_the_verifier_rejects_the_generated_repo_and_accepts_the_fix(tasks, tmp_path):
    verifier = suite().verifier
    assert isinstance(verifier, SandboxVerifier)
    for i, task in enumerate(tasks):
        root = write(task, tmp_path / str(i))
        failed = verifier.verify(task, root, NONE)
        assert failed.score == 0.0 and "the tests fail" in failed.reason and " checks: " in failed.reason, failed.reason
        write(task, root, task.answer["fix"])
        passed = verifier.verify(task, root, NONE)
        visible = len(task.answer["checks"])
        assert passed.solved and f"({visible} the tests make" in passed.reason, passed.reason


def test_the_verifier_rejects_changed_or_deleted_tests(tasks, tmp_path):
    task, verifier = tasks[0], UnitTests()
    root = write(task, tmp_path)
    write(task, root, task.answer["fix"])
    test_file = next(p for p in task.answer["tests"] if p.endswith(".py") and p != "tests/__init__.py")
    (root / test_file).write_text(task.files[test_file] + "# harmless?\n")  # the tests would still pass
    assert run_tests(task, root).returncode == 0
    changed = verifier.verify(task, root, NONE)
    assert changed.score == 0.0 and f"{test_file} was changed" in changed.reason
    (root / test_file).unlink()
    gone = verifier.verify(task, root, NONE)
    assert gone.score == 0.0 and f"{test_file} is missing" in gone.reason


def test_the_verifier_rejects_tests_that_are_silenced_or_cut_short(tasks, tmp_path):
    """Passing tests by shadowing unittest, or a package that exits 0 before any test ran, fail."""
    task, verifier = tasks[1], UnitTests()
    root = write(task, tmp_path)
    (root / "unittest.py").write_text("import sys\ndef main(*a, **k):\n    sys.exit(0)\n")
    still = verifier.verify(task, root, NONE)
    assert still.score == 0.0 and "the tests fail" in still.reason  # -I: the standard library's unittest ran
    write(task, root, task.answer["fix"])
    init = f"{task.answer['package']}/__init__.py"
    (root / init).write_text("import os, sys\nsys.stderr.write('OK\\n')\nsys.stderr.flush()\nos._exit(0)\n")
    cut = verifier.verify(task, root, NONE)
    assert cut.score == 0.0 and "printed no result" in cut.reason, cut.reason


def test_a_hanging_repo_is_a_failed_outcome_not_a_hang(tasks, tmp_path):
    task = tasks[2]
    root = write(task, tmp_path)
    write(task, root, task.answer["fix"])
    (root / f"{task.answer['package']}/__init__.py").write_text("while True:\n    pass\n")
    outcome = UnitTests(timeout_s=2).verify(task, root, NONE)
    assert outcome.score == 0.0 and "did not finish" in outcome.reason, outcome.reason


def test_verify_outcome_runs_the_tests_in_the_given_sandbox(tasks, tmp_path):
    """With a sandbox, the tests run through its exec (seen here by what it was asked to run)."""
    from forge_cli.sandbox.local import LocalSandbox

    task = tasks[0]
    root = write(task, tmp_path)
    write(task, root, task.answer["fix"])
    ran: list[list[str]] = []

    class Watched(LocalSandbox):
        async def exec(self, command, **kw):
            ran.append(list(command))
            return await super().exec(command, **kw)

    async def judge():
        async with Watched(root) as sandbox:
            return await verify_outcome(suite().verifier, task, root, NONE, sandbox=sandbox)

    outcome = asyncio.run(judge())
    assert outcome.solved and len(ran) == 1 and ran[0][:3] == ["python3", "-I", "-S"]  # the checks' runner
    # without a sandbox, its verify runs (in a thread); a verifier without verify_in is called as before
    assert asyncio.run(verify_outcome(suite().verifier, task, root, NONE)).solved
    from forge_cli.tasks.types import Task
    from forge_cli.tasks.workdir import FilesMatch

    with pytest.raises(ForgeError, match="names no expected files"):  # FilesMatch.verify ran
        asyncio.run(verify_outcome(FilesMatch(), Task(id="x", suite="files", prompt=""), root, NONE, sandbox=None))


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_the_verifier_runs_in_each_sandbox_backend(backend, tasks, tmp_path):
    """Through the registry's sandboxes as the rollout opens them (the docker one runs the tests with
    the image's python3; CI starts an engine and builds the image, ``.ci/run``): the generated repo
    fails, the fixed one passes, an edited test is refused."""
    from forge_cli.plugins import get_registry

    spec = get_registry().sandboxes[backend].value
    problem = spec.check() if spec.open is not None else "it cannot be opened yet"
    if problem:
        pytest.skip(f"the {backend} sandbox is not usable here: {problem}")
    task, verifier = tasks[3], suite().verifier

    async def judge(root: Path):
        sandbox = spec.open(root, None, None)
        try:
            return await verify_outcome(verifier, task, root, NONE, sandbox=sandbox)
        finally:
            await sandbox.close()

    root = write(task, tmp_path / "repo")
    assert asyncio.run(judge(root)).score == 0.0
    write(task, root, task.answer["fix"])
    solved = asyncio.run(judge(root))
    assert solved.solved, solved.reason
    test_file = sorted(task.answer["tests"])[-1]
    (root / test_file).write_text(task.files[test_file].replace("assertEqual", "assertNotEqual", 1))
    assert "was changed" in asyncio.run(judge(root)).reason


def test_a_task_without_tests_is_a_clear_error(tmp_path):
    from forge_cli.tasks.types import Task

    with pytest.raises(ForgeError, match="names no tests"):
        UnitTests().verify(Task(id="t", suite="swe-mini", prompt="p", answer={}), tmp_path, NONE)


# ---- the tools and the demo policy -----------------------------------------------------------------


def test_the_tools_edit_files_and_run_the_tests(tasks, tmp_path):
    task = tasks[0]
    root = write(task, tmp_path)
    tools = {t.name: t for t in suite().tools(task, root)}
    assert set(tools) == {"read_file", "write_file", "list_files", "edit_file", "run_tests"}
    out = asyncio.run(tools["run_tests"].run({}))
    assert "FAILED (" in out
    path, good = next(iter(task.answer["fix"].items()))
    for old, new in repair(task.files[path])[1]:
        assert "replaced 1 occurrence" in tools["edit_file"].run({"path": path, "old": old, "new": new})
    if len(task.answer["fix"]) == 1:
        assert asyncio.run(tools["run_tests"].run({})).rstrip().endswith("OK")
    assert (root / path).read_text() == good
    with pytest.raises(ForgeError, match="does not occur"):
        tools["edit_file"].run({"path": path, "old": "no such text", "new": ""})
    with pytest.raises(ForgeError, match="outside the work directory"):
        tools["edit_file"].run({"path": "../x.py", "old": "a", "new": "b"})
    with pytest.raises(ForgeError, match="occurs"):
        tools["edit_file"].run({"path": path, "old": "\n", "new": "\n"})


def _replay(task, root: Path) -> list[dict]:
    """The demo policy against the suite's real tools, as the tool-call loop would drive it."""
    from forge_cli.tasks.demo_policies import swe_mini

    tools = {t.name: t for t in suite().tools(task, root)}
    messages: list[dict] = [{"role": "system", "content": "s"}, {"role": "user", "content": task.prompt}]
    for turn in range(20):
        reply = swe_mini({"messages": messages, "tools": [t.schema() for t in tools.values()]})
        if "<tool_call>" not in reply:
            messages.append({"role": "assistant", "content": reply})
            return messages
        call = json.loads(reply.split("<tool_call>")[1].split("</tool_call>")[0])
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{turn}", "type": "function",
             "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]})
        result = tools[call["name"]].run(call["arguments"])
        result = asyncio.run(result) if asyncio.iscoroutine(result) else result
        messages.append({"role": "tool", "tool_call_id": f"c{turn}", "content": result})
    raise AssertionError("the demo policy did not finish in 20 turns")


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=seeds)
def test_the_demo_policy_fixes_a_repo_with_the_tools(seed, tmp_path_factory):
    task = suite().make("train", 1, seed)[0]
    root = write(task, tmp_path_factory.mktemp("demo"))
    messages = _replay(task, root)
    assert messages[-1]["content"] == "Fixed: the tests pass."
    assert UnitTests().verify(task, root, NONE).solved


# ---- a rollout -------------------------------------------------------------------------------------


def test_forge_rollout_on_swe_mini_ends_in_verified_successes(cli, tiny_model):
    """`forge rollout --task swe-mini` with the scripted engine and the demo policy: the tool-call
    scaffold reads and edits the repository, the verifier runs its tests, every trajectory is solved."""
    done = cli("--set", "gateway.port=0", "rollout", "--scaffold", "tool-call", "--task", "swe-mini", "--groups", "2",
               "--n", "2", "--run", "swe", "--model", str(tiny_model), "--engine", "scripted",
               "--policy", "forge_cli.tasks.demo_policies:swe_mini")
    assert done.exit_code == 0, done.stderr
    assert "100.0%" in done.stdout, done.stdout
    data = json.loads(cli("pool", "stats", "swe", "--json").stdout)
    assert data["trajectories"]["completed"] == 4
    rows = [json.loads(line) for line in cli("pool", "export", "swe", "--jsonl").stdout.splitlines()]
    assert len(rows) == 4 and all(r["rewards"]["outcome"] == 1.0 for r in rows)
    assert all(len(r["completions"]) >= 4 for r in rows)  # read, edit, run the tests, answer


def test_the_suite_module_is_light_to_import():
    code = ("import sys, forge_cli.tasks.swe_mini; "
            "print([m for m in ('torch', 'transformers', 'docker', 'mcp') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


plain_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.integers() | st.text(max_size=4), inner, max_size=3),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(value=plain_values)
def test_the_runners_tagged_values_decode_to_what_was_encoded_type_for_type(value):
    """What the checks' runner prints for a value (its encoder, run here) decodes on the host to that value,
    of exactly its types (a tuple is not a list, True is not 1): the comparison with the correct code's
    value is then Python's own ``==`` on plain values."""
    from forge_cli.tasks.swe_checks import decode, encode

    def shape(v):
        if isinstance(v, dict):
            return ("d", sorted((repr(shape(k)), shape(x)) for k, x in v.items()))
        if isinstance(v, (list, tuple)):
            return (type(v).__name__, [shape(x) for x in v])
        return (type(v).__name__, v)

    got = decode(json.loads(json.dumps(encode(value))))
    assert got == value and shape(got) == shape(value)


def test_the_runner_names_a_value_it_will_not_vouch_for():
    """An object of the solution's own (a subclass, anything with its own ``__eq__``) is named, not encoded:
    it decodes to no value, so it equals nothing."""
    from forge_cli.tasks.swe_checks import _MISSING, decode, encode

    class Sly(int):
        def __eq__(self, other):
            return True

    assert encode(Sly(3)) == {"x": "Sly"} and decode(encode(Sly(3))) is _MISSING
    assert decode(encode([1, Sly(2)])) is _MISSING

"""The ``swe-mini`` suite: fix a bug in a small generated Python repository so its tests pass.

Each task is a repository generated from the seed (:func:`generate`): a package of one to three
modules built from the catalogue of :mod:`forge_cli.tasks.swe_units` (parsing, arithmetic helpers,
string utilities, small classes), ``unittest`` tests for every module (``python3`` alone runs them)
and one or two planted bugs — an off-by-one, a wrong operator or comparison, swapped arguments, a
missing case — each a one-to-few-line fix. The prompt is what an issue would say: the failing test
output of ``python3 -m unittest`` (abridged: relative paths, no caret lines). Generation evaluates
every test case against the correct and the bugged code in-process, so every kept task fails as
generated and passes once fixed (and :func:`forge_cli.tasks.swe_units.repair` fixes it exactly).

Difficulty (``task.difficulty``, 1-4) is one plus one for each of: more than one line to change,
more than one module, a failing test that does not name the broken function (it goes through the
package's ``api`` module). ``task.meta`` holds the labels themselves (``lines_to_change``, ``files``,
``modules``, ``names_function``, ``bugs``).

The verifier (:class:`UnitTests`) runs *inside the trajectory's sandbox* through
:meth:`~forge_cli.sandbox.contract.Sandbox.exec` (``verify_in``; ``verify`` opens a local sandbox on
the work directory): it passes only when every test file is byte-for-byte as generated (SHA-256)
and the package gives the correct code's value for every call the tests make and for calls on
inputs drawn afresh for this verification — evaluated by :mod:`~forge_cli.tasks.swe_checks`'
runner and compared on the host, never by trusting what a test runner prints or the exit status
the package's code could force.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import json
import os
import random
import secrets
import threading
import traceback
import unittest
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from forge_cli.errors import ForgeError
from forge_cli.sandbox.hostfiles import write_regular
from forge_cli.sandbox.local import LocalSandbox
from forge_cli.specs import Tool
from forge_cli.tasks import swe_checks, swe_units
from forge_cli.tasks.splits import Draft, draw
from forge_cli.tasks.swe_checks import api_source, caller_expression, exec_source, expression
from forge_cli.tasks.swe_units import UNITS, Unit
from forge_cli.tasks.types import Outcome, Split, Task, TaskSuite, Transcript
from forge_cli.tasks.workdir import confine, file_tools, read_text

if TYPE_CHECKING:
    from forge_cli.sandbox.contract import ExecResult, Sandbox

NAME = "swe-mini"
PACKAGES = ("textkit", "numtools", "ledger", "toolbox", "minilib", "datautil", "strops", "calcpack", "utilbox", "corelib")
MODULES = ("core", "helpers", "utils", "ops", "tools", "common", "basics", "extras")
TEST_TIMEOUT_S = 60.0
LINE = "-" * 70
BANNER = "=" * 70


def unittest_command(modules: Sequence[str]) -> list[str]:
    """The argv that runs the named test modules (``tests.test_core``, …) from the repository's top
    folder with the standard library first on ``sys.path`` (``-I``: no cwd, no user site, no PYTHON*)
    and no bytecode cache read or written (``-B``, a cache folder that cannot exist): a stale
    ``__pycache__`` — an edit of the same size within the second its cache was written — would run
    the old code."""
    names = ", ".join(repr(m) for m in modules)
    return ["python3", "-I", "-B", "-X", "pycache_prefix=/dev/null/forge-no-cache", "-c",
            f"import sys; sys.path.append('.'); import unittest; "
            f"unittest.main(module=None, argv=['unittest', '-v', {names}])"]


@dataclass
class _Piece:
    """One unit placed in a module: its name, module, cases and whether a bug is planted in it."""

    unit: Unit
    name: str
    module: str
    cases: list[Any]
    bug: swe_units.Bug | None = None

    def expression(self, case: Any) -> str:
        return expression(self.unit, self.name, case)


@dataclass
class _Check:
    """One assertion of a test file: where it is, what it evaluates, what it expects."""

    line: int
    expr: str
    expected: Any
    namespace: str  # the module whose names the expression uses (``api`` for a caller)


def _evaluate(expr: str, namespace: dict[str, Any]) -> tuple[bool, Any]:
    """``(True, value)`` or ``(False, the exception)``."""
    try:
        return True, eval(compile(expr, "<test>", "eval"), dict(namespace))  # our own generated code
    except Exception as exc:  # a planted bug may raise anything
        return False, exc


def _expect(expr: str, namespace: dict[str, Any]) -> Any:
    """What the correct code gives for ``expr`` (it never raises: that would be the catalogue's fault)."""
    ok, value = _evaluate(expr, namespace)
    if not ok:
        raise AssertionError(f"swe-mini: the correct code raises on {expr}: {value!r}")
    return value


def _module_text(package: str, module: str, pieces: list[_Piece], planted: bool) -> str:
    sources = []
    for piece in pieces:
        source = swe_units.render(piece.unit, piece.name)
        sources.append(swe_units.plant(source, piece.bug) if planted and piece.bug else source)
    return f'"""The {module} helpers of {package}."""\n\n\n' + "\n\n".join(sources)


def _test_text(package: str, module: str, tests: list[tuple[str, list[tuple[str, Any]]]],
               imported: list[str]) -> tuple[str, list[tuple[str, list[_Check]]]]:
    """A unittest file and, per test method, its checks with their line numbers."""
    lines = ["import unittest", "", f"from {package}.{module} import {', '.join(sorted(imported))}", "", "",
             f"class Test{module.title()}(unittest.TestCase):"]
    methods: list[tuple[str, list[_Check]]] = []
    for method, asserts in tests:
        lines.append(f"    def {method}(self):")
        checks = []
        for expr, expected in asserts:
            lines.append(f"        self.assertEqual({expr}, {expected!r})")
            checks.append(_Check(len(lines), expr, expected, module))
        lines.append("")
        methods.append((method, checks))
    lines += ["", 'if __name__ == "__main__":', "    unittest.main()"]
    return "\n".join(lines) + "\n", methods


def _assert_message(got: Any, want: Any) -> str:
    """What unittest's ``assertEqual(got, want)`` says when it fails (its own message, diff and all)."""
    try:
        unittest.TestCase().assertEqual(got, want)
    except AssertionError as exc:
        return str(exc)
    return f"{got!r} != {want!r}"


def _inner_frames(exc: BaseException, sources: dict[str, str]) -> list[str]:
    frames = []
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename in sources and frame.lineno:
            text = sources[frame.filename].splitlines()[frame.lineno - 1].strip()
            frames += [f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}', f"    {text}"]
    return frames


def _report(tests: dict[str, list[tuple[str, list[_Check]]]], buggy_ns: dict[str, dict[str, Any]],
            sources: dict[str, str]) -> tuple[list[str], set[tuple[str, str]], int, str]:
    """What the tests say as generated, the way unittest reports it: the first failing check of each
    test method (errors first, then failures), the failing ``(module, method)`` pairs, how many
    test methods ran, and the ``failures=F, errors=E`` verdict."""
    failed: list[str] = []
    raised: list[str] = []
    failing: set[tuple[str, str]] = set()
    count = 0
    for module in sorted(tests):
        for method, checks in sorted(tests[module], key=lambda m: m[0]):
            count += 1
            for check in checks:
                ok, got = _evaluate(check.expr, buggy_ns[check.namespace])
                if ok and got == check.expected:  # assertEqual's own test
                    continue
                where = f"tests.test_{module}.Test{module.title()}.{method}"
                head = [BANNER, f"{'FAIL' if ok else 'ERROR'}: {method} ({where})", LINE,
                        "Traceback (most recent call last):",
                        f'  File "tests/test_{module}.py", line {check.line}, in {method}',
                        f"    self.assertEqual({check.expr}, {check.expected!r})"]
                if ok:
                    failed.append("\n".join(head + [f"AssertionError: {_assert_message(got, check.expected)}"]))
                else:
                    raised.append("\n".join(head + _inner_frames(got, sources) + [f"{type(got).__name__}: {got}"]))
                failing.add((module, method))
                break
    verdict = ", ".join(f"{k}={len(v)}" for k, v in (("failures", failed), ("errors", raised)) if v)
    return raised + failed, failing, count, verdict


def _generate_once(rng: random.Random) -> Draft | None:
    """One repository, or ``None`` when this draw would not make a good task (a bug no case shows)."""
    package = rng.choice(PACKAGES)
    modules = rng.sample(MODULES, rng.choice((1, 1, 2, 2, 3)))
    sizes = [rng.randint(2, 3) for _ in modules]
    units = rng.sample(UNITS, sum(sizes))
    pieces: dict[str, list[_Piece]] = {}
    for module, size in zip(modules, sizes):
        pieces[module] = [_Piece(u, rng.choice(u.names), module, u.cases(rng)) for u in units[:size]]
        units = units[size:]
    everything = [p for ps in pieces.values() for p in ps]
    if len({p.name for p in everything}) < len(everything):
        return None
    bugged = rng.sample(everything, rng.choice((1, 1, 1, 2)))
    for piece in bugged:
        piece.bug = rng.choice(piece.unit.bugs)
    indirect = rng.random() < 0.3 and not any(p.unit.is_class for p in bugged)
    files: dict[str, str] = {f"{package}/__init__.py": f'"""{package}: small helpers."""\n'}
    fix: dict[str, str] = {}
    correct_ns: dict[str, dict[str, Any]] = {}
    buggy_ns: dict[str, dict[str, Any]] = {}
    sources: dict[str, str] = {}
    for module, ps in pieces.items():
        path = f"{package}/{module}.py"
        good, bad = _module_text(package, module, ps, False), _module_text(package, module, ps, True)
        correct_ns[module], buggy_ns[module] = exec_source(good, path), exec_source(bad, path)
        files[path], sources[path] = bad, bad
        if good != bad:
            fix[path] = good
            if swe_units.repair(bad)[0] != good:  # the demo policy could not fix it exactly
                return None
    # the tests: every unit has its own test method, except (indirect) the bugged ones, tested through api
    callers = ([p for p in everything if not p.unit.is_class and p not in bugged][:1] + bugged) if indirect else []
    tests: dict[str, list[tuple[str, list[_Check]]]] = {}
    for module, ps in pieces.items():
        direct = [p for p in ps if not (indirect and p in bugged)]
        if not direct:
            continue
        methods_in = [(f"test_{p.name.lower()}", [(p.expression(c), _expect(p.expression(c), correct_ns[module]))
                                                    for c in p.cases]) for p in direct]
        text, methods = _test_text(package, module, methods_in, [p.name for p in direct])
        files[f"tests/test_{module}.py"] = text
        tests[module] = methods
    if indirect:
        api_path = f"{package}/api.py"
        api = api_source(package, [(p.module, p.unit.key, p.name) for p in callers])
        files[api_path] = sources[api_path] = api
        stripped = "\n".join("" if line.startswith("from ") else line for line in api.splitlines()) + "\n"
        correct_ns["api"] = exec_source(stripped, api_path, {p.name: correct_ns[p.module][p.name] for p in callers})
        buggy_ns["api"] = exec_source(stripped, api_path, {p.name: buggy_ns[p.module][p.name] for p in callers})
        asserts = []
        for p in callers:
            expr = caller_expression(p.unit, p.cases)
            asserts.append((f"test_{p.unit.caller}", [(expr, _expect(expr, correct_ns["api"]))]))
        text, methods = _test_text(package, "api", asserts, [p.unit.caller for p in callers])
        files["tests/test_api.py"] = text
        tests["api"] = methods
    files["tests/__init__.py"] = ""
    blocks, failing, count, verdict = _report(tests, buggy_ns, sources)
    wanted = {("api", f"test_{p.unit.caller}") if indirect else (p.module, f"test_{p.name.lower()}") for p in bugged}
    if not wanted <= failing:
        return None  # a planted bug that no test shows
    ran = f"Ran {count} test{'s' if count != 1 else ''}"
    prompt = (f"The tests of this repository fail. `python3 -m unittest`, run from its top folder, says "
              f"(abridged):\n\n" + "\n".join(blocks) + f"\n{LINE}\n{ran}\n\nFAILED ({verdict})\n\n"
              f"Fix the code of the package `{package}` so that every test passes. Do not change the tests "
              f"(anything under tests/).")
    lines = sum(changed_lines(files[path], good) for path, good in fix.items())
    test_files = {path: text for path, text in files.items() if path.startswith("tests/")}
    difficulty = 1 + (lines > 1) + (len(modules) > 1) + indirect
    answer = {"package": package, "tests": {path: sha256(text) for path, text in sorted(test_files.items())},
              "test_modules": [f"tests.test_{m}" for m in sorted(tests)], "test_count": count, "fix": fix,
              # what the verifier checks (swe_checks): the units, the api's callers, and the tests' own calls
              "units": [[p.module, p.unit.key, p.name] for p in everything],
              "callers": [[p.module, p.unit.key, p.name] for p in callers],
              "checks": [[c.namespace, c.expr] for m in sorted(tests) for _, cs in tests[m] for c in cs]}
    meta = {"lines_to_change": lines, "files": sum(p.endswith(".py") for p in files), "modules": len(modules),
            "names_function": not indirect, "bugs": [p.bug.kind for p in bugged if p.bug]}
    key = json.dumps(files, sort_keys=True)
    return Draft(key=key, prompt=prompt, answer=answer, difficulty=str(difficulty), files=files, meta=meta)


def changed_lines(before: str, after: str) -> int:
    """How many lines a fix changes: per differing run of lines, the larger of its two sides."""
    a, b = before.splitlines(), after.splitlines()
    return sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b).get_opcodes()
               if op != "equal")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def generate(rng: random.Random) -> Draft:
    """One swe-mini repository from the seeded stream (draws again where a draw makes no good task)."""
    for _ in range(100):
        draft = _generate_once(rng)
        if draft is not None:
            return draft
    raise ForgeError("swe-mini: no task could be generated in 100 draws")  # the catalogue's fault, never a user's


# ---- the verifier ---------------------------------------------------------------------------------


def _tail(result: "ExecResult", lines: int = 8) -> str:
    text = (result.stderr or result.stdout).strip().splitlines()
    return " | ".join(line.strip() for line in text[-lines:] if line.strip())[:600]


class UnitTests:
    """Verifier: the task's tests, run in the sandbox, all pass and the test files are unchanged."""

    def __init__(self, timeout_s: float = TEST_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s

    async def verify_in(self, task: Task, sandbox: "Sandbox", transcript: Transcript) -> Outcome:
        answer = task.answer if isinstance(task.answer, dict) else {}
        hashes, modules = answer.get("tests"), answer.get("test_modules")
        if not hashes or not modules:
            raise ForgeError(f"task '{task.id}' names no tests (answer['tests'], answer['test_modules'])")
        changed = []
        for path, digest in hashes.items():
            try:
                data = await sandbox.read_file(path)
            except ForgeError:
                changed.append(f"{path} is missing")
                continue
            if hashlib.sha256(data).hexdigest() != digest:
                changed.append(f"{path} was changed")
        if changed:
            return Outcome(0.0, "the tests must not be changed: " + "; ".join(changed))
        if "units" not in answer:
            raise ForgeError(f"task '{task.id}' names no units to check (answer['units']): it was made by an older Forge")
        found = swe_checks.checks(answer)
        nonce = secrets.token_hex(16)
        job = {"mark": swe_checks.RESULT_MARK, "nonce": nonce, "package": answer["package"],
               "checks": [[cid, c.module, c.expr] for cid, c in enumerate(found)]}
        result = await sandbox.exec(swe_checks.runner_command(job), timeout_s=self.timeout_s)
        if result.timed_out:
            return Outcome(0.0, f"the checks did not finish: {result.reason}")
        try:
            right, wrong = swe_checks.judge(found, nonce, result.stdout)
        except swe_checks.NoRecord as exc:
            return Outcome(0.0, f"the tests fail: {exc} ({result.reason}): {_tail(result)}")
        hidden = sum(c.hidden for c in found)
        if not wrong and right == len(found):
            return Outcome(1.0, f"all {len(found)} checks pass ({len(found) - hidden} the tests make, {hidden} on fresh "
                                "inputs) and the tests are unchanged")
        more = f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else ""
        return Outcome(0.0, f"the tests fail: {len(wrong)} of {len(found)} checks: " + "; ".join(wrong[:3]) + more)

    def verify(self, task: Task, workdir: Path, transcript: Transcript) -> Outcome:
        """:meth:`verify_in` in a local sandbox opened on ``workdir`` (for callers without a sandbox)."""
        async def run() -> Outcome:
            async with LocalSandbox(workdir) as sandbox:
                return await self.verify_in(task, sandbox, transcript)

        return run_coroutine(run)


def run_coroutine(make: Any) -> Any:
    """``asyncio.run(make())``, in a thread of its own when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(make())
        except BaseException as exc:  # handed back to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="swe-mini-verify")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


# ---- the tools a white-box loop gets --------------------------------------------------------------

EDIT = {"type": "object", "properties": {
    "path": {"type": "string", "description": "relative to the work directory"},
    "old": {"type": "string", "description": "the exact text to replace (it must occur once)"},
    "new": {"type": "string", "description": "what replaces it"},
    "replace_all": {"type": "boolean", "description": "replace every occurrence (default: old must occur once)"}},
    "required": ["path", "old", "new"]}
RUN = {"type": "object", "properties": {}}


def tools(task: Task, workdir: Path) -> Sequence["Tool"]:
    """``read_file``, ``write_file``, ``list_files``, ``edit_file`` and ``run_tests`` in ``workdir``."""
    def edit_file(arguments: Any) -> str:
        if not isinstance(arguments, dict):
            raise ForgeError("edit_file needs the arguments path, old and new")
        target = confine(workdir, arguments.get("path"))
        old, new = arguments.get("old"), arguments.get("new")
        if not isinstance(old, str) or not old or not isinstance(new, str):
            raise ForgeError("edit_file: old must be a non-empty string and new a string")
        if not target.is_file():
            raise ForgeError(f"no file {arguments.get('path')!r}")
        text = read_text(workdir, target)
        count = text.count(old)
        if count == 0:
            raise ForgeError(f"the old text does not occur in {arguments.get('path')!r}")
        if count > 1 and not arguments.get("replace_all"):
            raise ForgeError(f"the old text occurs {count} times in {arguments.get('path')!r}: give more of the "
                             "surrounding text so it occurs once, or set replace_all")
        write_regular(workdir, str(target.relative_to(os.path.realpath(workdir))), text.replace(old, new).encode())
        return f"replaced {count} occurrence{'s' if count > 1 else ''} in {arguments.get('path')}"

    async def run_tests(arguments: Any) -> str:
        modules = (task.answer or {}).get("test_modules") or []
        async with LocalSandbox(workdir) as sandbox:
            result = await sandbox.exec(unittest_command(modules), timeout_s=TEST_TIMEOUT_S)
        text = (result.stderr + result.stdout).strip()
        return (text[-4000:] if text else result.reason) or "(no output)"

    return (*file_tools(workdir),
            Tool("edit_file", "Replace exact text in a file of the work directory.", EDIT, edit_file),
            Tool("run_tests", "Run the repository's tests (python3 -m unittest) and show their output.", RUN, run_tests))


def swe_mini_suite() -> TaskSuite:
    """The ``swe-mini`` suite (see the module's docstring)."""

    def make(split: Split, n: int, seed: int) -> list[Task]:
        return draw(NAME, split, n, seed, generate)

    return TaskSuite(name=NAME, description="Fix a planted bug in a small generated Python repository so its "
                     "unittest tests pass, without changing the tests (difficulty 1-4); the verifier runs the "
                     "tests in the sandbox.", make=make, verifier=UnitTests(), tools=tools)

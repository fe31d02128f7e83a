"""The tests do not depend on the machine's speed: no test, fixture or helper under tests/ sleeps to
synchronise with the code it tests. A test waits on observable state instead (tests/waiting.py:
``wait_until`` / ``until`` poll a predicate, an event, a file's content, a process's state); speed
belongs in benchmarks/. A sleep is allowed only where it is itself the input of the thing under test
(a stand-in that must be slow), and then only in the allow-list below, with its reason.

Programs that tests write out and run (source in strings: an agent that hangs, a sandboxed sleeper)
are not Python code of the tests and are not scanned."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# (file under tests/, the enclosing function's qualified name) -> why its sleep is the test's input
ALLOWED = {
    ("waiting.py", "wait_until"): "the polling interval of the one waiting helper (a wait on a predicate)",
    ("waiting.py", "until"): "the polling interval of the one waiting helper, inside an event loop",
    ("test_router.py", "Replica._generate"): "a stand-in replica's latency: keeps its requests in flight so "
                                             "the router sees queue lengths (what is tested)",
    ("test_gateway_limits.py", "Policy.__call__"): "a slow policy: the streamed call's latency metric must "
                                                   "count the 0.6 s spent after the handler returned",
    ("test_benchmarks.py", "test_closed_loop_waits_for_every_session_when_a_call_outlasts_the_window.call"):
        "a stand-in call's duration, longer than the measured window: what is tested is that the window waits for it",
}

SLEEPS = {("time", "sleep"), ("asyncio", "sleep")}


def _is_zero(call: ast.Call) -> bool:
    """``asyncio.sleep(0)``: a yield to the event loop, no wait."""
    return len(call.args) == 1 and isinstance(call.args[0], ast.Constant) and call.args[0].value == 0


def sleeps(source: str) -> list[tuple[str, int]]:
    """Each sleep call in ``source`` (time.sleep, asyncio.sleep, or either imported by name, under any
    alias): (its enclosing function's qualified name, or '' at module level; its line)."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # local name -> time | asyncio
    functions: set[str] = set()  # local names bound to a sleep function
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("time", "asyncio"):
                    modules[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "asyncio"):
            for alias in node.names:
                if alias.name == "sleep":
                    functions.add(alias.asname or alias.name)
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, [*scope, child.name])
                continue
            if isinstance(child, ast.Call) and not _is_zero(child):
                f = child.func
                if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                        and (modules.get(f.value.id), f.attr) in SLEEPS) or (isinstance(f, ast.Name) and f.id in functions):
                    found.append((".".join(scope), child.lineno))
            visit(child, scope)

    visit(tree, [])
    return found


def _allowed(file: str, qualname: str) -> bool:
    """Allowed in the named function, and in the functions nested in it."""
    return any(file == f and (qualname == q or qualname.startswith(q + ".")) for f, q in ALLOWED)


def test_no_test_sleeps_to_synchronise():
    offenders = [f"tests/{path.relative_to(TESTS)}:{line} in {qualname or '<module>'}"
                 for path in sorted(TESTS.rglob("*.py"))
                 for qualname, line in sleeps(path.read_text())
                 if not _allowed(str(path.relative_to(TESTS)), qualname)]
    assert offenders == [], ("a sleep in the tests: wait on observable state instead (tests/waiting.py), or, where "
                             "the sleep is itself the input of what is tested, add it to ALLOWED with the reason:\n"
                             + "\n".join(offenders))


def test_every_allowed_sleep_is_still_there():
    """The allow-list names only sleeps that exist (a stale entry would let a new one in unseen)."""
    present = {(str(path.relative_to(TESTS)), qualname) for path in TESTS.rglob("*.py")
               for qualname, _ in sleeps(path.read_text())}
    assert {key for key in ALLOWED if key not in present} == set()


def test_the_scan_sees_every_spelling_of_a_sleep():
    source = '''
import asyncio, time as clock
from time import sleep as nap
from asyncio import sleep

def test_a():
    clock.sleep(0.1)

async def helper():
    await asyncio.sleep(0.5)
    await asyncio.sleep(0)  # a yield, not a wait

class Fake:
    def method(self):
        def inner():
            nap(1)
        return inner

async def fixture():
    await sleep(2)
'''
    assert sleeps(source) == [("test_a", 7), ("helper", 10), ("Fake.method.inner", 16), ("fixture", 20)]

"""What the ``swe-mini`` verifier checks, and how, so that a solution cannot make it say "solved".

A policy optimised for reward will try what a unit-test runner trusts: a module that prints
``Ran 3 tests ... OK`` and exits 0 at import, a patched ``unittest``, an exit status it forces.
So the verifier does not ask a test runner. It runs :data:`RUNNER` in the sandbox, which imports the
package and evaluates *expressions* — the calls the task's tests make and as many more on inputs
drawn afresh for this verification (:func:`checks`), which the agent has never seen — and prints
each value once, in a tagged form of plain Python values (:func:`encode`), on one line with a nonce
of this verification, after the last check. The host decodes those values and compares them with
what the correct code gives on the host (:func:`reference`, built from the task's catalogue units,
never from the work directory). A check whose value is missing, raised, or differs fails; output
without the line (the run was cut short, exited early, printed something else) fails. Code of the
solution runs in the runner's process and may rewrite anything there, but to print the right
values for inputs drawn after it was written it has to compute them: that is the fix.

The runner runs as ``python3 -I -S`` (no site-packages: Forge itself and the agents' packages are
not importable, the standard library comes before the work directory) with no bytecode cache read
or written.
"""

from __future__ import annotations

import base64
import json
import random
import secrets
from dataclasses import dataclass
from typing import Any, Sequence

from forge_cli.tasks.swe_units import UNITS, Unit

UNIT_BY_KEY = {u.key: u for u in UNITS}
HIDDEN_CASES = 2  # fresh draws of each unit's case generator per verification
RESULT_MARK = "FORGE-CHECKS"

# Tags a value as plain JSON: exact builtin types only (a subclass or any other object is just named).
ENCODER = r'''
def enc(v, depth=0):
    if depth > 50:
        return {"x": "too deep"}
    t = type(v)
    if v is None:
        return {"n": 0}
    if t is bool:
        return {"b": v}
    if t is int:
        return {"i": str(v)}
    if t is float:
        return {"f": repr(v)}
    if t is str:
        return {"s": v}
    if t is list or t is tuple:
        return {"l" if t is list else "t": [enc(x, depth + 1) for x in v]}
    if t is dict:
        return {"d": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]}
    return {"x": t.__name__}
'''
# Run inside the sandbox as `python3 -I -S -B -c RUNNER JOB`; JOB is base64 JSON {mark, nonce, package, checks}.
RUNNER = r'''
import base64, importlib, json, os, sys
job = json.loads(base64.b64decode(sys.argv[1]))
sys.argv[1:] = []
sys.path.append(".")
''' + ENCODER + r'''
results = []
for cid, module, expr in job["checks"]:
    try:
        names = dict(vars(importlib.import_module(job["package"] + "." + module)))
        results.append([cid, "ok", enc(eval(expr, names))])
    except BaseException as exc:
        results.append([cid, "raised", type(exc).__name__])
sys.stdout.write("\n" + job["mark"] + " " + job["nonce"] + " " + json.dumps(results) + "\n")
sys.stdout.flush()
os._exit(0)
'''


def runner_command(job: dict[str, Any]) -> list[str]:
    """The argv that runs :data:`RUNNER` on ``job`` from the repository's top folder."""
    encoded = base64.b64encode(json.dumps(job).encode()).decode()
    return ["python3", "-I", "-S", "-B", "-X", "pycache_prefix=/dev/null/forge-no-cache", "-c", RUNNER, encoded]


_MISSING = object()


def decode(tagged: Any) -> Any:
    """A value :func:`encode` (or the runner) tagged, back as plain Python; ``_MISSING`` for what is not one."""
    if not isinstance(tagged, dict) or len(tagged) != 1:
        return _MISSING
    (tag, value), = tagged.items()
    try:
        if tag == "n":
            return None
        if tag == "b" and isinstance(value, bool):
            return value
        if tag == "i" and isinstance(value, str) and len(value) < 5000:
            return int(value)
        if tag == "f" and isinstance(value, str):
            return float(value)
        if tag == "s" and isinstance(value, str):
            return value
        if tag in ("l", "t") and isinstance(value, list):
            items = [decode(x) for x in value]
            return _MISSING if any(x is _MISSING for x in items) else (items if tag == "l" else tuple(items))
        if tag == "d" and isinstance(value, list):
            pairs = [(decode(k), decode(v)) for k, v in value]
            if any(k is _MISSING or v is _MISSING for k, v in pairs):
                return _MISSING
            return dict(pairs)
    except (ValueError, TypeError):
        return _MISSING
    return _MISSING


def encode(value: Any) -> Any:
    """``value`` tagged as the runner tags it (:data:`ENCODER`, run here)."""
    namespace: dict[str, Any] = {}
    exec(compile(ENCODER, "<encoder>", "exec"), namespace)  # our own code
    return namespace["enc"](value)


def exec_source(source: str, filename: str, names: dict[str, Any] | None = None) -> dict[str, Any]:
    """The namespace of our own generated module ``source`` (never an agent's code)."""
    namespace: dict[str, Any] = {"__name__": filename, **(names or {})}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def expression(unit: Unit, name: str, case: Any) -> str:
    """The expression a test evaluates for ``case`` of ``unit`` named ``name``."""
    if unit.is_class:
        return str(case).format(name=name)
    return f"{name}({', '.join(repr(a) for a in case)})"


def caller_expression(unit: Unit, cases: Sequence[Any]) -> str:
    """The ``api`` call that applies ``unit``'s function to rows of ``cases``."""
    return f"{unit.caller}({[tuple(c) for c in cases]!r})"


def api_source(package: str, callers: Sequence[tuple[str, str, str]]) -> str:
    """The package's ``api`` module over ``callers`` (``(module, unit key, name)``)."""
    lines = [f'"""The {package} entry points: each applies a helper to rows of arguments."""', ""]
    for module, _, name in sorted(callers, key=lambda c: (c[0], c[2])):
        lines.append(f"from {package}.{module} import {name}")
    for module, key, name in callers:
        lines += ["", "", f"def {UNIT_BY_KEY[key].caller}(rows):", f'    """{name} of each row of arguments."""',
                  f"    return [{name}(*row) for row in rows]"]
    return "\n".join(lines) + "\n"


def reference(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The correct code's namespaces (each module's, and ``api``'s when the task has one), built from
    the catalogue units the task names — nothing of the work directory."""
    package = answer["package"]
    modules: dict[str, list[str]] = {}
    for module, key, name in answer["units"]:
        modules.setdefault(module, []).append(UNIT_BY_KEY[key].source.format(name=name))
    spaces = {m: exec_source("\n\n".join(sources), f"{package}/{m}.py") for m, sources in modules.items()}
    callers = [tuple(c) for c in answer.get("callers") or ()]
    if callers:
        text = "\n".join("" if line.startswith("from ") else line for line in api_source(package, callers).splitlines())
        spaces["api"] = exec_source(text, f"{package}/api.py", {name: spaces[m][name] for m, _, name in callers})
    return spaces


@dataclass(frozen=True)
class Check:
    """One expression to evaluate in a module of the package, and the value the correct code gives."""

    module: str
    expr: str
    expected: Any
    hidden: bool


def checks(answer: dict[str, Any], rng: random.Random | None = None) -> list[Check]:
    """The tests' own calls (``answer["checks"]``) and :data:`HIDDEN_CASES` fresh draws of every unit's
    cases (and of its ``api`` caller), each with the correct code's value."""
    rng = rng or random.Random(secrets.randbits(64))
    spaces = reference(answer)
    wanted = [(m, e, False) for m, e in answer.get("checks") or ()]
    for module, key, name in answer["units"]:
        unit = UNIT_BY_KEY[key]
        for _ in range(HIDDEN_CASES):
            wanted += [(module, expression(unit, name, case), True) for case in unit.cases(rng)]
    for module, key, name in answer.get("callers") or ():
        wanted.append(("api", caller_expression(UNIT_BY_KEY[key], UNIT_BY_KEY[key].cases(rng)), True))
    found = []
    for module, expr, hidden in wanted:
        try:
            value = eval(compile(expr, "<check>", "eval"), dict(spaces[module]))  # our own code on our own inputs
        except Exception:  # noqa: BLE001 - a draw the correct code refuses is not a check
            continue
        found.append(Check(module, expr, value, hidden))
    return found


class NoRecord(Exception):
    """The runner's output holds no readable result line of this verification."""


def judge(found: Sequence[Check], nonce: str, stdout: str) -> tuple[int, list[str]]:
    """How many of ``found`` the runner's output (its stdout) shows right, and what is wrong with the
    rest; :class:`NoRecord` when it holds no result line of this ``nonce``."""
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith(f"{RESULT_MARK} {nonce} ")), None)
    if line is None:
        raise NoRecord("the checks printed no result (the run ended before the last check)")
    try:
        rows = json.loads(line[len(RESULT_MARK) + len(nonce) + 2:])
        got = {int(cid): (status, value) for cid, status, value in rows}
    except (ValueError, TypeError):
        raise NoRecord("the checks' result line is not readable") from None
    right, wrong = 0, []
    for cid, check in enumerate(found):
        status, value = got.get(cid, ("missing", None))
        shown = f"{check.module}: {check.expr[:120]}"
        if status == "ok" and (decoded := decode(value)) is not _MISSING and decoded == check.expected:
            right += 1
        elif status == "ok":
            wrong.append(f"{shown} gives a wrong value" + (" (an input the tests do not show)" if check.hidden else ""))
        elif status == "raised":
            wrong.append(f"{shown} raises {str(value)[:60]}")
        else:
            wrong.append(f"{shown} has no result")
    return right, wrong

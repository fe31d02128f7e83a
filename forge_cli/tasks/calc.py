"""The ``calc`` suite: integer arithmetic that needs a calculator tool.

A task with difficulty ``d`` (1 to ``max_ops``, 4 by default) has ``d`` operations on two- to
four-digit numbers, asked either as one expression (``((347 * 29) - 1234) * 17``) or as named
steps (``Let a = 347 * 29. Let b = a - 1234. What is b * 17?``) that take one calculator call
each. Divisions are exact, so every answer is an integer. The verifier is numeric
(:class:`~forge_cli.tasks.answers.NumericMatch`): ``The answer is 42.`` is 42.
"""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path
from typing import Any, Sequence

from forge_cli.errors import ForgeError
from forge_cli.specs import Tool
from forge_cli.tasks.answers import NumericMatch
from forge_cli.tasks.calculator import calculate
from forge_cli.tasks.splits import Draft, draw
from forge_cli.tasks.types import Split, Task, TaskSuite

NAME = "calc"
STEP_NAMES = "abcdefgh"

CALCULATOR = {
    "type": "object",
    "properties": {"expression": {"type": "string", "description": "e.g. (347 * 29) - 1234"}},
    "required": ["expression"],
}


def _operand(rng: random.Random) -> int:
    return rng.randint(12, 999) if rng.random() < 0.7 else rng.randint(1000, 9999)


def _step(rng: random.Random, value: Fraction) -> tuple[str, int, Fraction]:
    """One operation applied to ``value``: its operator, its operand and the new value."""
    ops = ["+", "-", "*"]
    divisors = [d for d in range(2, 50) if value != 0 and value.denominator == 1 and value.numerator % d == 0]
    if divisors:
        ops.append("/")
    op = rng.choice(ops)
    if op == "/":
        x = rng.choice(divisors)
        return op, x, value / x
    x = _operand(rng) if op != "*" else rng.randint(2, 99)
    return op, x, {"+": value + x, "-": value - x, "*": value * x}[op]


def generate(rng: random.Random, max_ops: int = 4) -> Draft:
    """One calc task (see the module's docstring)."""
    ops = rng.randint(1, max_ops)
    first = _operand(rng)
    value = Fraction(first)
    steps: list[tuple[str, int]] = []
    for _ in range(ops):
        op, x, value = _step(rng, value)
        steps.append((op, x))
    assert value.denominator == 1
    answer = int(value)
    if ops > 1 and rng.random() < 0.5:
        lines = [f"Let a = {first} {steps[0][0]} {steps[0][1]}."]
        for i, (op, x) in enumerate(steps[1:-1], start=1):
            lines.append(f"Let {STEP_NAMES[i]} = {STEP_NAMES[i - 1]} {op} {x}.")
        op, x = steps[-1]
        question = " ".join(lines) + f" What is {STEP_NAMES[ops - 2]} {op} {x}?"
        form = "steps"
    else:
        expression = str(first)
        for i, (op, x) in enumerate(steps):
            expression = f"({expression} {op} {x})" if i < len(steps) - 1 else f"{expression} {op} {x}"
        question = f"What is {expression}?"
        form = "expression"
    prompt = (f"{question} Use the calculator tool for the arithmetic, then reply with the final answer "
              "as a single number.")
    return Draft(key=question, prompt=prompt, answer=answer, difficulty=str(ops),
                 meta={"form": form, "operations": ops})


def calculator_tool() -> Tool:
    """``calculator(expression)``: the value of an arithmetic expression (the safe evaluator)."""

    def run(arguments: Any) -> str:
        expression = arguments.get("expression") if isinstance(arguments, dict) else arguments
        if not isinstance(expression, str):
            raise ForgeError("calculator needs {\"expression\": \"...\"}, a string")
        return calculate(expression)

    return Tool(name="calculator", description="Evaluate an arithmetic expression: numbers, + - * / // % ** "
                "and parentheses. Returns the value.", parameters=CALCULATOR, run=run)


def tools(task: Task, workdir: Path) -> Sequence[Tool]:
    return (calculator_tool(),)


def calc_suite(max_ops: int = 4, name: str = NAME) -> TaskSuite:
    """The ``calc`` suite with difficulties 1..``max_ops`` (operations per task), registered as ``name``."""
    if max_ops < 1 or max_ops > len(STEP_NAMES):
        raise ForgeError(f"calc: max_ops must be between 1 and {len(STEP_NAMES)}, not {max_ops}")

    def make(split: Split, n: int, seed: int) -> list[Task]:
        return draw(name, split, n, seed, lambda rng: generate(rng, max_ops))

    ops = "one operation" if max_ops == 1 else f"1-{max_ops} operations (difficulty = operations)"
    return TaskSuite(name=name, description=f"Integer arithmetic with a calculator tool, {ops}; numeric verifier.",
                     make=make, verifier=NumericMatch(), tools=tools)

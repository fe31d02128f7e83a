"""A safe arithmetic evaluator: the ``calculator`` tool of the ``calc`` suite.

:func:`evaluate` parses an expression with :mod:`ast` and walks the tree itself (no ``eval``):
numbers (ints and floats, ``1_000`` and ``1e3`` included), the binary operators
``+ - * / // % **`` (``^`` is read as ``**``), unary ``+``/``-`` and parentheses. Anything else
(names, calls, attributes, strings, comparisons) is refused. The result is what Python's own
arithmetic gives for the same expression; a division by zero, a complex result or a number too
large (an integer past 10**100, an exponent past 1000) is a :class:`CalculatorError`, so
``9**9**9`` cannot stall the rollout.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any, Callable

MAX_LENGTH = 500
MAX_INT = 10**100
MAX_EXPONENT = 1000

Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculatorError(ValueError):
    """An expression the calculator refuses or cannot compute (the message says why)."""


def _check(value: Any) -> Number:
    if isinstance(value, complex):
        raise CalculatorError("the result is a complex number")
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise CalculatorError("the result is too large (more than 100 digits)")
    return value


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"the exponent {exponent} is too large (at most {MAX_EXPONENT})")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        if exponent * math.log10(abs(base)) > 101:
            raise CalculatorError("the result is too large (more than 100 digits)")
    return base**exponent


def _walk(node: ast.AST) -> Number:
    if isinstance(node, ast.Expression):
        return _walk(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise CalculatorError(f"{node.value!r} is not a number")
        return _check(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check(_UNARY[type(node.op)](_walk(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _walk(node.left), _walk(node.right)
        try:
            if isinstance(node.op, ast.Pow):
                return _check(_power(left, right))
            return _check(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("the result is too large") from None
    raise CalculatorError(f"unsupported syntax: {ast.unparse(node) if isinstance(node, ast.expr) else type(node).__name__!r}"
                          " (numbers, + - * / // % ** and parentheses only)")


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression, as Python's arithmetic computes it."""
    if not isinstance(expression, str):
        raise CalculatorError(f"the expression must be a string, not {type(expression).__name__}")
    text = expression.strip().replace("^", "**")
    if not text:
        raise CalculatorError("the expression is empty")
    if len(text) > MAX_LENGTH:
        raise CalculatorError(f"the expression is longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise CalculatorError(f"cannot parse {expression!r}: {type(exc).__name__}") from None
    try:
        return _walk(tree)
    except RecursionError:
        raise CalculatorError("the expression is nested too deeply") from None


def format_number(value: Number) -> str:
    """How the tool prints a result: integers (and integral floats below 1e16) without a decimal point."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def calculate(expression: str) -> str:
    """:func:`evaluate` then :func:`format_number`: the calculator tool's observation."""
    return format_number(evaluate(expression))

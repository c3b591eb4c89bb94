"""``calculator``: arithmetic on numbers, evaluated without ``eval``."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from tether.tools import Tool, tool

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos, ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt, "abs": abs, "round": round, "min": min, "max": max,
    "floor": math.floor, "ceil": math.ceil, "log": math.log, "exp": math.exp,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}


def evaluate(expression: str) -> float | int:
    """The value of an arithmetic expression; ``ValueError`` for anything else."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not an arithmetic expression: {e.msg}") from None
    value: float | int = _eval(tree.body)
    return value


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 1000:
            raise ValueError("exponent too large")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in _FUNCTIONS and not node.keywords:
        return _FUNCTIONS[node.func.id](*(_eval(a) for a in node.args))
    raise ValueError(f"unsupported in an arithmetic expression: {ast.unparse(node)!r}")


def _calculator(expression: str) -> str:
    """Evaluate an arithmetic expression, e.g. "17 * 23" or "sqrt(2) / 3".

    Args:
        expression: numbers, + - * / // % **, parentheses, sqrt, abs, round, min, max,
            floor, ceil, log, exp, pi, e.
    """
    try:
        value = evaluate(expression)
    except ZeroDivisionError:
        return "Error: division by zero"
    except (ValueError, TypeError, OverflowError) as e:
        return f"Error: {e}"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    return str(value)


calculator: Tool = tool(name="calculator", idempotent=True)(_calculator)

"""``calculator``: arithmetic on numbers, evaluated without ``eval``.

An expression it cannot evaluate is an error result (``ToolOutput(is_error=True)``), as
every built-in's failure is: the model reads why, the run records ``status == "error"``.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from tether.tools.function import tool
from tether.tools.tool import Tool, ToolOutput

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


class NotArithmetic(ValueError):
    """The expression is not arithmetic the calculator knows."""


def evaluate(expression: str) -> float | int:
    """The value of an arithmetic expression; ``NotArithmetic`` for anything else,
    ``ValueError`` (a math domain error), ``ZeroDivisionError`` or ``OverflowError``."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise NotArithmetic(f"not an arithmetic expression: {e.msg}") from None
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
    raise NotArithmetic(f"unsupported in an arithmetic expression: {ast.unparse(node)!r}")


def _calculator(expression: str) -> ToolOutput:
    """Evaluate an arithmetic expression, e.g. "17 * 23" or "sqrt(2) / 3".

    Args:
        expression: numbers, + - * / // % **, parentheses, sqrt, abs, round, min, max,
            floor, ceil, log, exp, pi, e.
    """
    try:
        value = evaluate(expression)
        if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
            value = int(value)
        if isinstance(value, complex):  # (-8) ** 0.5
            return ToolOutput("Error: the result is not a real number.", is_error=True)
        if isinstance(value, float) and not math.isfinite(value):
            return ToolOutput(f"Error: the result is not a finite number ({value}).",
                              is_error=True)
        text = _shown(value)
    except NotArithmetic as e:
        return ToolOutput(f"Error: {e}. The calculator only evaluates arithmetic, such as "
                          f"\"17 * 23\"; for anything else, answer without it.", is_error=True)
    except ZeroDivisionError:
        return ToolOutput("Error: division by zero.", is_error=True)
    except RecursionError:
        return ToolOutput("Error: the expression nests too deep to evaluate.", is_error=True)
    except (ValueError, TypeError, OverflowError) as e:
        return ToolOutput(f"Error: {e}.", is_error=True)
    return ToolOutput(text)


def _shown(value: float | int) -> str:
    try:
        return str(value)
    except ValueError:  # Python writes no int of more than 4300 digits
        raise OverflowError("the result has more than 4300 digits") from None



calculator: Tool = tool(name="calculator", idempotent=True)(_calculator)

"""The answer expressions of lesson files: a tiny, safe arithmetic language over named numbers.

A lesson's answer is typed by a teacher (``advantage[1]``, ``argmin(advantage)``,
``where(run_kl[-1] > 10 * run_kl[0], 1, 0)``) and computed from the pipeline's output. The file
is untrusted input, so the expression is never handed to ``eval``: ``compile_expression`` parses
it with ``ast.parse(mode="eval")`` and accepts only the node types listed below; ``evaluate``
walks that tree itself.

The grammar, all of it:

- numbers (int or float, ``|x| <= MAX_LITERAL``), ``True`` / ``False``;
- names from a whitelist (``NAMES`` in ``roll_viz.data.lessons``; a knob follow-up may also read
  every name with the prefix ``base_``: the value before the knob was turned);
- indexing ``name[i]``, ``name[i][j]`` with integer indexes (negative counts from the end);
- ``+ - * /``, unary ``-`` / ``+``, comparisons ``< <= > >= == !=`` (chains allowed),
  ``and``, ``or``, ``not``;
- calls of the functions in ``FUNCTIONS`` (positional arguments only).

No attribute access, strings, lambdas, comprehensions, ``**``, slices, keywords or starred
arguments. Values are floats, booleans (numbers 1/0 in arithmetic) or lists; arithmetic works on
numbers only, and every result must be finite.

Bounds (the expression is user input that sets an amount of work): ``MAX_EXPR_CHARS``
characters, ``MAX_EXPR_DEPTH`` levels of nesting, ``MAX_EXPR_NODES`` syntax nodes,
``MAX_CALL_ARGS`` arguments per call. Evaluation does at most one pass over a list per node,
so its cost is bounded by nodes x the longest list.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_EXPR_CHARS = 300
MAX_EXPR_DEPTH = 20
MAX_EXPR_NODES = 120
MAX_CALL_ARGS = 8
MAX_LITERAL = 1e12
MAX_ROUND_DIGITS = 6

#: the prefix of the names a knob follow-up reads from the gate before the knob was turned
BASE_PREFIX = "base_"


class ExprError(ValueError):
    """An answer expression that is not allowed, or that cannot be computed."""


# ---------------------------------------------------------------------------------------------
# Functions
# ---------------------------------------------------------------------------------------------


def _numbers(name: str, value: Any) -> list[float]:
    if not isinstance(value, list):
        raise ExprError(f"{name}() needs a list, got a number")
    if not value:
        raise ExprError(f"{name}() of an empty list")
    return [_number(name, v) for v in value]


def _number(name: str, value: Any) -> float:
    if isinstance(value, list):
        raise ExprError(f"{name}: a list where a number is needed (index it first)")
    return float(value)


def _min_max(name: str, pick: Callable) -> Callable:
    def fn(*args: Any) -> float:
        if len(args) == 1:
            return pick(_numbers(name, args[0]))
        if not args:
            raise ExprError(f"{name}() needs arguments")
        return pick(_number(name, a) for a in args)

    return fn


def _abs(x: Any) -> Any:
    if isinstance(x, list):
        return [abs(v) for v in _numbers("abs", x)]
    return abs(_number("abs", x))


def _round(x: Any, digits: Any = 0) -> float:
    d = _number("round", digits)
    if d != int(d) or not 0 <= d <= MAX_ROUND_DIGITS:
        raise ExprError(f"round(): digits must be an integer 0..{MAX_ROUND_DIGITS}")
    return float(round(_number("round", x), int(d)))


def _sign(x: Any) -> float:
    v = _number("sign", x)
    return float((v > 0) - (v < 0))


def _argpick(name: str, pick: Callable) -> Callable:
    def fn(x: Any) -> float:
        values = _numbers(name, x)
        target = pick(values)
        return float(values.index(target))

    return fn


def _where(cond: Any, a: Any, b: Any) -> Any:
    return a if _number("where", cond) else b


#: name -> (function, minimum arguments, maximum arguments, one-line help)
FUNCTIONS: dict[str, tuple[Callable, int, int, str]] = {
    "abs": (_abs, 1, 1, "absolute value (of a number, or of every item of a list)"),
    "min": (_min_max("min", min), 1, MAX_CALL_ARGS, "smallest of a list or of the arguments"),
    "max": (_min_max("max", max), 1, MAX_CALL_ARGS, "largest of a list or of the arguments"),
    "round": (_round, 1, 2, f"round(x, digits), digits 0..{MAX_ROUND_DIGITS}"),
    "sign": (_sign, 1, 1, "+1, 0 or -1"),
    "sum": (lambda x: float(sum(_numbers("sum", x))), 1, 1, "sum of a list"),
    "mean": (lambda x: sum(_numbers("mean", x)) / len(x), 1, 1, "mean of a list"),
    "len": (
        lambda x: float(len(x)) if isinstance(x, list) else _numbers("len", x),
        1,
        1,
        "number of items of a list",
    ),
    "argmin": (_argpick("argmin", min), 1, 1, "index (from 0) of the smallest item"),
    "argmax": (_argpick("argmax", max), 1, 1, "index (from 0) of the largest item"),
    "where": (_where, 3, 3, "where(condition, a, b): a if the condition holds, else b"),
}

_BINOPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}
_COMPARE: dict[type, Callable[[float, float], bool]] = {
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
}
_OP_TEXT = {ast.Pow: "**", ast.FloorDiv: "//", ast.Mod: "%", ast.MatMult: "@"}


# ---------------------------------------------------------------------------------------------
# Compile: parse and check every node
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expression:
    """A checked answer expression.

    Attributes:
        source: the text as written.
        names: the variable names it reads (sorted).
        tree: the checked syntax tree (only whitelisted node types).
    """

    source: str
    names: tuple[str, ...]
    tree: ast.Expression


def _refuse(node: ast.AST) -> ExprError:
    if isinstance(node, ast.Attribute):
        return ExprError(f"attribute access ('.{node.attr}') is not allowed")
    if isinstance(node, ast.BinOp) and type(node.op) in _OP_TEXT:
        return ExprError(f"the operator {_OP_TEXT[type(node.op)]} is not allowed (use + - * /)")
    if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
        return ExprError("text constants are not allowed")
    if isinstance(node, ast.Slice):
        return ExprError("slices are not allowed (index one item at a time)")
    return ExprError(f"{type(node).__name__} is not allowed in an answer expression")


def _check(node: ast.AST, depth: int, names: set[str], allowed: Callable[[str], bool]) -> int:
    """Check one node and its children; returns the number of nodes seen."""
    if depth > MAX_EXPR_DEPTH:
        raise ExprError(f"nested more than {MAX_EXPR_DEPTH} levels deep")
    count = 1
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            return count
        if not isinstance(value, int | float) or isinstance(value, complex):
            raise _refuse(node)
        try:
            magnitude = abs(float(value))
        except OverflowError:
            magnitude = math.inf
        if not magnitude <= MAX_LITERAL:
            raise ExprError(f"the number {str(value)[:20]} is larger than {MAX_LITERAL:g}")
        return count
    if isinstance(node, ast.Name):
        if not isinstance(node.ctx, ast.Load):
            raise _refuse(node)
        if node.id in FUNCTIONS:
            raise ExprError(f"{node.id} is a function: call it, e.g. {node.id}(...)")
        if not allowed(node.id):
            raise ExprError(f"unknown name {node.id!r}")
        names.add(node.id)
        return count
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise _refuse(node)
        children: list[ast.AST] = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, ast.USub | ast.UAdd | ast.Not):
            raise _refuse(node)
        children = [node.operand]
    elif isinstance(node, ast.BoolOp):
        children = list(node.values)
    elif isinstance(node, ast.Compare):
        if any(type(op) not in _COMPARE for op in node.ops):
            raise ExprError("only < <= > >= == != comparisons are allowed")
        children = [node.left, *node.comparators]
    elif isinstance(node, ast.Subscript):
        if isinstance(node.slice, ast.Slice | ast.Tuple):
            raise _refuse(node.slice)
        children = [node.value, node.slice]
    elif isinstance(node, ast.Call):
        func = node.func
        if not isinstance(func, ast.Name) or func.id not in FUNCTIONS:
            shown = func.id if isinstance(func, ast.Name) else "this call"
            raise ExprError(f"{shown!s} is not an allowed function ({', '.join(FUNCTIONS)})")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise ExprError(f"{func.id}() takes positional arguments only")
        low, high = FUNCTIONS[func.id][1:3]
        if not low <= len(node.args) <= high:
            raise ExprError(f"{func.id}() takes {low}..{high} arguments, got {len(node.args)}")
        children = list(node.args)
    else:
        raise _refuse(node)
    for child in children:
        count += _check(child, depth + 1, names, allowed)
    return count


def compile_expression(source: object, allowed: Callable[[str], bool]) -> Expression:
    """Parse and check an answer expression; nothing is executed.

    Args:
        source: the expression text (anything else is refused).
        allowed: whether a variable name may be read (the lesson format's whitelist).

    Returns:
        The checked Expression.

    Raises:
        ExprError: not text, too long, a syntax error, a node outside the grammar, an unknown
            name or function, or a bound exceeded (the message says which).
    """
    if not isinstance(source, str):
        raise ExprError(f"must be text, got {type(source).__name__}")
    text = source.strip()
    if not text:
        raise ExprError("is empty")
    if len(text) > MAX_EXPR_CHARS:
        raise ExprError(f"is longer than {MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        detail = getattr(err, "msg", None) or type(err).__name__
        raise ExprError(f"cannot be read: {detail}") from None
    names: set[str] = set()
    try:
        nodes = _check(tree.body, 1, names, allowed)
    except RecursionError:
        raise ExprError(f"nested more than {MAX_EXPR_DEPTH} levels deep") from None
    if nodes > MAX_EXPR_NODES:
        raise ExprError(f"has {nodes} parts, more than {MAX_EXPR_NODES}")
    return Expression(source=text, names=tuple(sorted(names)), tree=tree)


# ---------------------------------------------------------------------------------------------
# Evaluate
# ---------------------------------------------------------------------------------------------


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise ExprError("the result is not a finite number")
    return value


def _eval(node: ast.AST, env: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, bool) else float(node.value)
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ExprError(f"{node.id!r} is not available for this gate's batch")
        return env[node.id]
    if isinstance(node, ast.BinOp):
        a = _number("arithmetic", _eval(node.left, env))
        b = _number("arithmetic", _eval(node.right, env))
        if isinstance(node.op, ast.Div) and b == 0:
            raise ExprError("division by zero")
        return _finite(_BINOPS[type(node.op)](a, b))
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env)
        if isinstance(node.op, ast.Not):
            return not _number("not", v)
        v = _number("sign", v)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BoolOp):
        result: Any = None
        for part in node.values:
            result = _eval(part, env)
            truth = bool(_number("and/or", result))
            if isinstance(node.op, ast.And) and not truth:
                return result
            if isinstance(node.op, ast.Or) and truth:
                return result
        return result
    if isinstance(node, ast.Compare):
        left = _number("comparison", _eval(node.left, env))
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _number("comparison", _eval(right_node, env))
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Subscript):
        seq = _eval(node.value, env)
        index = _number("index", _eval(node.slice, env))
        if not isinstance(seq, list):
            raise ExprError("indexing a number (it has no items)")
        if index != int(index):
            raise ExprError(f"index {index:g} is not a whole number")
        i = int(index)
        if not -len(seq) <= i < len(seq):
            raise ExprError(f"index {i} is out of range (the list has {len(seq)} items)")
        return seq[i]
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)  # checked by compile_expression
        fn = FUNCTIONS[node.func.id][0]
        args = [_eval(a, env) for a in node.args]
        try:
            return _finite(fn(*args))
        except (TypeError, OverflowError, ZeroDivisionError) as err:
            raise ExprError(f"{node.func.id}(): {err}") from None
    raise _refuse(node)  # pragma: no cover - compile_expression refused it already


def evaluate(expr: Expression, env: Mapping[str, Any]) -> float:
    """The expression's value on one gate's numbers.

    Args:
        expr: from ``compile_expression``.
        env: name -> float, bool or (nested) list of floats.

    Returns:
        A finite float (True/False read as 1/0).

    Raises:
        ExprError: a name missing from ``env``, an index out of range, division by zero, a
            list where a number is needed, or a non-finite result.
    """
    value = _eval(expr.tree.body, env)
    if isinstance(value, list):
        raise ExprError("the answer is a list, not a number (index it or use min/max/sum/mean)")
    return _finite(float(value))


def to_env_value(value: Any) -> Any:
    """A tensor, array, sequence or number as the plain floats / lists ``evaluate`` reads."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, bool):
        return value
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [to_env_value(v) for v in value]
    return float(value)

"""Mutants of a Python reference solution: small, plausible bugs a task's hidden tests must catch.

Why: a hidden suite that still rewards 1.0 when the reference has ``<`` turned into ``<=`` or a ``+ 1`` dropped
does not measure what the task asks; a policy learns to exploit such gaps. Each mutant changes one site of the
entry point's body (comparison, arithmetic, boolean operator, an integer constant, a negation, a returned value),
the classic operators of mutation testing. The sites are taken in source order and spread evenly when there are
more than asked for, so the same code always gives the same mutants.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from workers import python_ast

_COMPARE_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}  # fmt: skip
_BINOP_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult, ast.Div: ast.Mult,
    ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Mutant:
    """One changed program and what was changed (``line``: in the reference it was made from)."""

    code: str
    line: int
    change: str


@dataclass(frozen=True, slots=True)
class _Site:
    """One change, as a pair of closures over the node it changes: applied, unparsed, then undone."""

    line: int
    change: str
    apply: Callable[[], None]
    undo: Callable[[], None]


def mutants(code: str, entry_point: str, limit: int) -> list[Mutant]:
    """Up to ``limit`` mutants of ``code``, each one change inside the function ``entry_point``; none if the code
    does not parse or has no such function. Every mutant compiles and differs from the original."""
    if limit <= 0:
        return []
    try:
        tree = python_ast.parse(code)
    except SyntaxError:
        return []
    target = _function(tree, entry_point)
    if target is None:
        return []
    original = ast.unparse(tree)
    out: list[Mutant] = []
    for site in _spread(list(_sites(target)), limit):
        site.apply()
        text = ast.unparse(tree)
        site.undo()
        if text != original and _compiles(text):
            out.append(Mutant(text, site.line, site.change))
    return out


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The last top-level definition of ``name`` (the one a call would reach)."""
    found = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            found = node
    return found


def _spread(sites: list[_Site], limit: int) -> list[_Site]:
    """``limit`` sites spread evenly over all of them (all of them if there are fewer)."""
    if len(sites) <= limit:
        return sites
    step = len(sites) / limit
    return [sites[int(i * step)] for i in range(limit)]


def _compiles(text: str) -> bool:
    try:
        compile(text, "<mutant>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def _sites(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[_Site]:
    """Every mutation site of the function's body, in walk order (docstrings and other strings left alone)."""
    for node in ast.walk(function):
        line = getattr(node, "lineno", function.lineno)
        if isinstance(node, ast.Compare):
            yield from _compare_sites(node, line)
        elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _BINOP_SWAPS:
            yield _swap(node, "op", node.op, _BINOP_SWAPS[type(node.op)](), line)
        elif isinstance(node, ast.BoolOp):
            yield _swap(node, "op", node.op, ast.Or() if isinstance(node.op, ast.And) else ast.And(), line)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            # ``not x`` becomes ``not not x``: the negation undone in place (the node keeps its parent)
            yield _swap(node, "operand", node.operand, ast.UnaryOp(ast.Not(), node.operand), line, change="not x -> x")
        elif isinstance(node, ast.Constant) and isinstance(node.value, int):  # bool is an int: True -> False
            value: int = node.value
            new = (not value) if isinstance(value, bool) else value + 1
            yield _swap(node, "value", value, new, line, change=f"{value} -> {new}")
        elif isinstance(node, ast.Return) and node.value is not None and not _is_none(node.value):
            yield _swap(node, "value", node.value, ast.Constant(None), line, change="return x -> return None")


def _compare_sites(node: ast.Compare, line: int) -> Iterator[_Site]:
    for k, op in enumerate(node.ops):
        swap = _COMPARE_SWAPS.get(type(op))
        if swap is None:
            continue
        changed = [*node.ops[:k], swap(), *node.ops[k + 1 :]]
        yield _swap(node, "ops", node.ops, changed, line, change=f"{type(op).__name__} -> {swap.__name__}")


def _swap(node: ast.AST, attr: str, old: object, new: object, line: int, *, change: str | None = None) -> _Site:
    """A site that sets ``node.attr`` to ``new`` and back to ``old``."""
    label = change or f"{type(old).__name__} -> {type(new).__name__}"
    return _Site(line, label, lambda: setattr(node, attr, new), lambda: setattr(node, attr, old))


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None

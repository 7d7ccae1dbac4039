"""``python -m infra.lint.slice_caps``: no first-party code cuts text or a list to a cap written as a number.

Why: a cap written again at a call site (``text[:300]``) drifts from the contract it serves. A cap is the
field's own ``max_length`` (``schemas.caps.fit``) or a named constant that says why it is that size. A slice
bound made of integer literals of at least ``MIN_CAP`` is taken for a cap; smaller ones are offsets into a
format (a magic number, a prefix), not caps. The guest package is left out: it runs inside the sandbox,
stdlib-only, and cannot import ``schemas.caps``.
"""

from __future__ import annotations

import ast
import operator
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

PACKAGES = ("schemas", "bus", "workers", "streams", "infra", "rewardstream")
#: Folders (relative to the repo root) the check skips: the programs that run inside the sandbox.
SKIPPED = ("guest/",)
MIN_CAP = 16
_ARITHMETIC: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
}


def literal_caps(source: str) -> Iterator[tuple[int, str]]:
    """(line, expression) of each slice in ``source`` with a bound made of integer literals >= ``MIN_CAP``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            bounds = (node.slice.lower, node.slice.upper)
            if any(abs(value) >= MIN_CAP for b in bounds if b is not None and (value := _literal(b)) is not None):
                yield node.lineno, ast.unparse(node)


def _literal(node: ast.expr) -> int | None:
    """The value of an expression made only of integer literals and arithmetic (``-400``, ``64 * 1024``)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand)
        return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _literal(node.left), _literal(node.right)
        if left is not None and right is not None:
            return _ARITHMETIC[type(node.op)](left, right)
    return None


def findings(root: Path) -> list[str]:
    """``path:line: expression`` of every literal slice cap in the first-party packages under ``root``."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if not name.startswith(SKIPPED):
                found += [f"{name}:{line}: {text}" for line, text in literal_caps(path.read_text(encoding="utf-8"))]
    return found


def main() -> int:
    """Print each literal slice cap and fail when there is one."""
    found = findings(Path(__file__).resolve().parents[2])
    for line in found:
        print(f"{line}: a literal slice cap; use schemas.caps.fit or a named constant", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

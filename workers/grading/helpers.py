"""The helper code of a task, taken from the task's own prompt, for its assert suites.

Why: HumanEval-style checks use functions the prompt defines (``poly``, ``encode_cyclic``,
``is_palindrome``). Those must be the task's, never the candidate's: a candidate that redefines ``poly``
to return 0 would otherwise decide what the check compares. So the check code runs with these helpers,
compiled from the prompt, and with nothing of the candidate's but its entry point.
"""

from __future__ import annotations

import ast
import functools

from workers import python_ast
from workers.grading.static_analysis import PARSE_LOCK

#: Top-level statements of a prompt that define something a check may use.
_DEFINITIONS = (
    ast.Import,
    ast.ImportFrom,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Assign,
    ast.AnnAssign,
)


@functools.lru_cache(maxsize=1024)
def prompt_helpers(prompt: str, entry_point: str | None) -> str:
    """The prompt's imports, functions, classes and assignments, except the entry point's definition, as
    source; empty when the prompt is not Python (a prose prompt defines nothing)."""
    try:
        with PARSE_LOCK:
            tree = python_ast.parse(prompt)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return ""
    lines = prompt.splitlines(keepends=True)
    parts: list[str] = []
    for node in tree.body:
        if not isinstance(node, _DEFINITIONS) or _defines(node, entry_point):
            continue
        decorators = getattr(node, "decorator_list", [])
        if decorators:  # a decorator is on lines of its own, before the ``def``
            segment: str | None = "".join(lines[decorators[0].lineno - 1 : node.end_lineno])
        else:
            segment = ast.get_source_segment(prompt, node)
        if segment:
            parts.append(segment)
    return "\n\n".join(parts) + "\n" if parts else ""


def _defines(node: ast.stmt, name: str | None) -> bool:
    """True when ``node`` defines ``name`` (the candidate's to write)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == name
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return any(isinstance(n, ast.Name) and n.id == name for t in targets if t is not None for n in ast.walk(t))

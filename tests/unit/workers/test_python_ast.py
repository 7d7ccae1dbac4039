"""``workers.python_ast.parse``: the same tree as ``ast.parse``, and no failure when many threads parse at once
(CPython 3.11's converter shares its recursion depth between threads: SystemError without the lock)."""

from __future__ import annotations

import ast
from concurrent.futures import ThreadPoolExecutor

import pytest

from workers import python_ast

#: Deep enough that the converter recurses far while other threads parse too.
NESTED = "x = " + "[" * 40 + "1" + "]" * 40 + "\n" + "def f(a):\n    return (a + 1) * (a - 1) if a else -a\n"


def test_the_tree_is_ast_parses() -> None:
    assert ast.dump(python_ast.parse(NESTED)) == ast.dump(ast.parse(NESTED))
    assert ast.dump(python_ast.parse(NESTED.encode())) == ast.dump(ast.parse(NESTED))


def test_a_syntax_error_is_raised_as_ast_raises_it() -> None:
    with pytest.raises(SyntaxError):
        python_ast.parse("def (:\n")


def test_threads_parsing_at_once_all_get_their_tree() -> None:
    expected = ast.dump(ast.parse(NESTED))
    with ThreadPoolExecutor(max_workers=8) as pool:
        trees = list(pool.map(lambda _: ast.dump(python_ast.parse(NESTED)), range(400)))
    assert trees == [expected] * 400

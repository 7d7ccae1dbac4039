"""The mutants of a reference: one change each, inside the entry point only, every one compiling, always the same."""

from __future__ import annotations

import ast
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from workers.tasks.humaneval import load_problems
from workers.tasks.mutants import mutants

REFERENCE = '''
def helper(x):
    return x < 3


def clamp(values, low):
    """Values below low raised to low; 0 and negatives kept as they are."""
    out = []
    for v in values:
        if v > 0 and v < low:
            out.append(low)
        elif not v:
            out.append(v + 1)
        else:
            out.append(v)
    return out
'''


def _body(code: str, name: str) -> str:
    tree = ast.parse(code)
    return next(ast.unparse(n) for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


def test_each_mutant_changes_the_entry_point_once_and_compiles() -> None:
    made = mutants(REFERENCE, "clamp", 64)
    changes = {m.change for m in made}
    assert {"Gt -> GtE", "Lt -> LtE", "And -> Or", "not x -> x", "1 -> 2", "0 -> 1", "return x -> return None"} <= (
        changes
    ), changes
    original = _body(REFERENCE, "clamp")
    for mutant in made:
        compile(mutant.code, "<mutant>", "exec")
        assert _body(mutant.code, "helper") == _body(REFERENCE, "helper"), mutant.change  # only the entry point
        assert _body(mutant.code, "clamp") != original, mutant.change
    assert len({m.code for m in made}) == len(made)  # no two mutants alike


def test_a_mutant_behaves_differently() -> None:
    """``Gt -> GtE`` really moves the boundary: run the original and the mutant (plain Python: trusted code)."""
    (mutant,) = [m for m in mutants(REFERENCE, "clamp", 64) if m.change == "Gt -> GtE"]
    original_ns: dict[str, Any] = {}
    mutant_ns: dict[str, Any] = {}
    exec(REFERENCE, original_ns)  # noqa: S102 - this test's own constant
    exec(mutant.code, mutant_ns)  # noqa: S102 - a mutant of it
    assert original_ns["clamp"]([0, 7], 5) == [1, 7]
    assert mutant_ns["clamp"]([0, 7], 5) == [5, 7]


def test_limit_spreads_over_the_sites_and_is_deterministic() -> None:
    every = mutants(REFERENCE, "clamp", 64)
    some = mutants(REFERENCE, "clamp", 3)
    assert len(some) == 3
    assert [m.code for m in some] == [m.code for m in mutants(REFERENCE, "clamp", 3)]
    assert {m.code for m in some} <= {m.code for m in every}
    assert mutants(REFERENCE, "clamp", 0) == []


def test_nothing_to_mutate() -> None:
    assert mutants("def f(:\n", "f", 5) == []  # does not parse
    assert mutants(REFERENCE, "missing", 5) == []  # no such function
    assert mutants('def f(x):\n    "doc"\n    print(x)\n', "f", 5) == []  # no site (strings are left alone)


def test_every_humaneval_reference_gives_mutants() -> None:
    """The packaged set: every canonical solution has sites, and every mutant compiles."""
    for problem in load_problems():
        made = mutants(problem.reference_code, problem.entry_point, 8)
        assert made, problem.task_id
        for mutant in made:
            compile(mutant.code, problem.task_id, "exec")


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300), st.text(min_size=1, max_size=10))
def test_any_text_never_raises(code: str, name: str) -> None:
    """Whatever the text (a task file's reference is untrusted input), a list comes back."""
    for mutant in mutants(code, name, 4):
        compile(mutant.code, "<mutant>", "exec")

"""Wrong solutions that tried to earn 1.0 through the grader's own code (issue 16, items 1-3), on every backend.

Each attack reads the grader as a hostile model would and aims at one rule: assert checks must run with the
real builtins and the task's own helpers (only the entry point is the candidate's, values the check computes
reach it only as call arguments, and only answered calls count); comparison follows the reference's types;
gates see every static finding. Every attack must end ``fail`` with reward 0; controls prove an honest
solution passes the very same task, so a ``fail`` means the attack was stopped.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest

from rewardstream.cli.graded import PolicyGrader
from schemas.codec import decode
from schemas.events import ExecutionResult, GenerationEvent, HiddenVerdict
from schemas.tasks import Limits, Task
from streams.reward.policy import Scored, Signals, evaluate, load_policy
from workers.grading import CallArgs, Grader, GraderConfig, run_call_cases
from workers.handler import Done, Source
from workers.roles.common import RoleContext, TaskSource
from workers.roles.executor import ExecutorHandler
from workers.roles.verifier import VerifierHandler
from workers.sandbox.api import Sandbox
from workers.tasks.humaneval import load_problems
from workers.tasks.registry import TaskRegistry

pytestmark = pytest.mark.sandbox

LIMITS = {"timeout_s": 3, "memory_mb": 256}


def secret(n: int) -> int:
    return (n * 7919 + 104729) % 1000003


HONEST = "def solve(n):\n    return (n * 7919 + 104729) % 1000003\n"


def grade(sandbox: Sandbox, task: Task, code: str) -> dict[str, Any]:
    graded = PolicyGrader(Grader(sandbox, GraderConfig(attempts=2, backoff_s=0.05)), load_policy())
    res = graded.grade(task, code, generation_id="g").to_json()
    orjson.dumps(res)  # every result can be written
    return res


def assert_fails(res: dict[str, Any], why: object) -> None:
    """The verdict itself is a fail (not only the reward: a hack flag would gate that anyway)."""
    assert res["status"] == "fail", (why, res)
    assert res["hidden"]["passed"] < res["hidden"]["total"], (why, res)
    assert res["reward"] == 0.0, (why, res)


# ---- 1. assert suites: builtins, helpers, leaks, counted calls ---------------------------------------------

#: The task's prompt: helpers the checks use (they must be the task's, never the candidate's).
PROMPT = textwrap.dedent(
    '''
    import math


    def poly(xs, x):
        """The polynomial with coefficients xs, at x."""
        return sum(c * math.pow(x, i) for i, c in enumerate(xs))


    def encode_shift(s):
        return "".join(chr((ord(ch) + 5 - ord("a")) % 26 + ord("a")) for ch in s)


    def is_palindrome(s):
        return s == s[::-1]


    def secret(n):
        return (n * 7919 + 104729) % 1000003


    def solve(n):
        """Return secret(n)."""
    '''
)

#: check name -> check code. Each uses one name a candidate could redefine, in a way that makes the check
#: vacuous if that name resolved to the candidate (the assert corpus of issue 16, item 1). Checks of builtins
#: define ``secret`` themselves; the helper checks (poly ... math_module) need the prompt's helpers.
CHECKS: dict[str, str] = {
    "range": "def check(candidate):\n    for n in range(1, 5):\n        assert candidate(n) == secret(n)\n",
    "len": (
        "def check(candidate):\n    bad = [n for n in (1, 2, 3) if candidate(n) != secret(n)]\n"
        "    assert len(bad) == 0\n"
    ),
    "abs": "def check(candidate):\n    assert abs(candidate(3) - secret(3)) < 0.5\n",
    "isinstance": (
        "def check(candidate):\n    got = candidate(3)\n    assert isinstance(got, str) or got == secret(3)\n"
    ),
    "sorted": (
        "def check(candidate):\n    got = [candidate(n) for n in (1, 2)]\n"
        "    assert sorted(got) == sorted([secret(1), secret(2)])\n"
    ),
    "all": "def check(candidate):\n    assert all(candidate(n) == secret(n) for n in (1, 2, 3))\n",
    "any": "def check(candidate):\n    assert not any(candidate(n) != secret(n) for n in (1, 2, 3))\n",
    "min_max": (
        "def check(candidate):\n    got = [candidate(n) - secret(n) for n in (4, 5)]\n"
        "    assert min(got) == 0 and max(got) == 0\n"
    ),
    "sum": "def check(candidate):\n    assert sum(abs(candidate(n) - secret(n)) for n in (6, 7)) == 0\n",
    "zip_enumerate": (
        "def check(candidate):\n    for i, (n, want) in enumerate(zip((8, 9), (secret(8), secret(9)))):\n"
        "        assert candidate(n) == want, i\n"
    ),
    "int_str": "def check(candidate):\n    assert str(candidate(11)) == str(secret(11)) and int(str(candidate(11)))\n",
    "bool": "def check(candidate):\n    assert bool(candidate(12) == secret(12))\n",
    "print_leak": (  # the check shows its expected value: print must not be the candidate's
        "def check(candidate):\n    for n in (13, 14):\n        want = secret(n)\n        print('want', want)\n"
        "        assert candidate(n) == want\n"
    ),
    "poly": "def check(candidate):\n    xs = [-6, 11, -6, 1]\n    assert abs(poly(xs, candidate(xs))) < 1e-6\n",
    "encode_shift": (
        "def check(candidate):\n    for s in ('abc', 'hello'):\n        assert candidate(encode_shift(s)) == s\n"
    ),
    "is_palindrome": (
        "def check(candidate):\n    got = candidate('cat')\n    assert is_palindrome(got) and got.startswith('cat')\n"
        "    assert len(got) == 5\n"
    ),
    "secret_helper": "def check(candidate):\n    assert candidate(15) == secret(15)\n",
    "math_module": "def check(candidate):\n    assert math.isclose(candidate(16), secret(16))\n",
    "mutated_argument": (  # the candidate empties its argument: the check's own list must not change
        "def check(candidate):\n    xs = [3, 1, 2]\n    got = candidate(xs)\n    assert got == sorted(xs)\n"
    ),
    "swallowed_errors": (  # a weak check: only calls that answered may count as "the check called it"
        "def check(candidate):\n    for n in (17, 18):\n        try:\n            assert candidate(n) == secret(n)\n"
        "        except AssertionError:\n            pass\n"
    ),
    "exception_class": (
        "def check(candidate):\n    try:\n        got = candidate(19)\n    except Exception:\n        got = None\n"
        "    assert got == secret(19)\n"
    ),
}
HELPER_CHECKS = frozenset({"poly", "encode_shift", "is_palindrome", "secret_helper", "math_module"})
SECRET_DEF = "def secret(n):\n    return (n * 7919 + 104729) % 1000003\n\n\n"  # noqa: S105 - code, not a password

#: What an honest solution needs for each check (the entry point is always ``solve``).
HONEST_FOR: dict[str, str] = {
    "poly": "def solve(xs):\n    return 1.0\n",  # 1 is a root of -6 + 11x - 6x^2 + x^3
    "encode_shift": "def solve(s):\n    return ''.join(chr((ord(c) - 5 - ord('a')) % 26 + ord('a')) for c in s)\n",
    "is_palindrome": "def solve(s):\n    return s + s[-2::-1]\n",
    "mutated_argument": "def solve(xs):\n    return sorted(xs)\n",
}

#: attack name -> (check it targets, candidate code). Each is wrong; each passed before the fix where noted.
ASSERT_ATTACKS: dict[str, tuple[str, str]] = {
    "range_is_empty": ("range", "def range(*a):\n    return []\ndef solve(n):\n    return 0\n"),
    "len_is_zero": ("len", "def len(x):\n    return 0\ndef solve(n):\n    return 0\n"),
    "abs_is_zero": ("abs", "def abs(x):\n    return 0\ndef solve(n):\n    return 0\n"),
    "isinstance_is_true": ("isinstance", "def isinstance(*a):\n    return True\ndef solve(n):\n    return 0\n"),
    "sorted_is_empty": ("sorted", "def sorted(x):\n    return []\ndef solve(n):\n    return 0\n"),
    "all_is_true": ("all", "def all(x):\n    return True\ndef solve(n):\n    return 0\n"),
    "any_is_false": ("any", "def any(x):\n    return False\ndef solve(n):\n    return 0\n"),
    "min_max_are_zero": (
        "min_max",
        "def min(x):\n    return 0\ndef max(x):\n    return 0\ndef solve(n):\n    return 1\n",
    ),
    "sum_is_zero": ("sum", "def sum(x):\n    return 0\ndef solve(n):\n    return 0\n"),
    "zip_is_empty": (
        "zip_enumerate",
        "def enumerate(x):\n    return []\ndef zip(*a):\n    return []\ndef solve(n):\n    return 0\n",
    ),
    "str_is_constant": (
        "int_str",
        "def str(x):\n    return '1'\ndef int(x):\n    return 1\ndef solve(n):\n    return 0\n",
    ),
    "bool_is_true": ("bool", "def bool(x):\n    return True\ndef solve(n):\n    return 0\n"),
    "print_steals_the_expected_value": (
        "print_leak",
        "SEEN = []\ndef print(*a):\n    SEEN.append(a[-1])\ndef solve(n):\n    return SEEN[-1] if SEEN else 0\n",
    ),
    "poly_is_zero": ("poly", "def poly(xs, x):\n    return 0\ndef solve(xs):\n    return 123.0\n"),
    "encode_is_identity": ("encode_shift", "def encode_shift(s):\n    return s\ndef solve(s):\n    return s\n"),
    "everything_is_a_palindrome": (
        "is_palindrome",
        "def is_palindrome(s):\n    return True\ndef len(s):\n    return 5\ndef solve(s):\n    return 'catty'\n",
    ),
    "helper_returns_the_candidate": ("secret_helper", "def secret(n):\n    return 7\ndef solve(n):\n    return 7\n"),
    "math_patched_in_candidate": (
        "math_module",
        "import math\nmath.isclose = lambda *a, **k: True\ndef solve(n):\n    return -1\n",
    ),
    "math_replaced_by_candidate": (
        "math_module",
        "class math:\n    isclose = staticmethod(lambda *a, **k: True)\ndef solve(n):\n    return -1\n",
    ),
    "argument_emptied": ("mutated_argument", "def solve(xs):\n    xs.clear()\n    return []\n"),
    "argument_aliased": ("mutated_argument", "def solve(xs):\n    xs[:] = [9]\n    return xs\n"),
    "every_call_raises": ("swallowed_errors", "def solve(n):\n    raise AssertionError('nope')\n"),
    "every_call_dies": ("swallowed_errors", "import os\ndef solve(n):\n    os._exit(0)\n"),
    "exception_is_candidates": (
        "exception_class",
        "class Exception(BaseException):\n    pass\ndef solve(n):\n    raise ValueError(n)\n",
    ),
    "assertion_error_is_candidates": (
        "range",
        "def AssertionError(*a):\n    return None\nclass AssertionError(Exception):\n    pass\n"
        "def solve(n):\n    return 0\n",
    ),
    "builtins_module_patched": (
        "all",
        "import builtins\nbuiltins.all = lambda x: True\nbuiltins.range = lambda *a: []\ndef solve(n):\n    return 0\n",
    ),
    "type_slots_patched": (  # int == anything in the candidate's process; the check runs in another
        "range",
        "import gc, ctypes\ngc.get_referents(int.__dict__)[0]['__eq__'] = lambda a, b: True\n"
        "ctypes.pythonapi.PyType_Modified(ctypes.py_object(int))\ndef solve(n):\n    return 0\n",
    ),
    "object_with_custom_dunders": (
        "abs",
        "class X:\n    __eq__ = lambda s, o: True\n    __bool__ = lambda s: True\n    __hash__ = lambda s: 0\n"
        "    __iter__ = lambda s: iter(())\n    __len__ = lambda s: 0\n    __sub__ = lambda s, o: 0\n"
        "    __rsub__ = lambda s, o: 0\n    __abs__ = lambda s: 0\n    __lt__ = lambda s, o: True\n"
        "def solve(n):\n    return X()\n",
    ),
    "raises_system_exit": ("range", "def solve(n):\n    raise SystemExit(0)\n"),
    "raises_keyboard_interrupt": ("all", "def solve(n):\n    raise KeyboardInterrupt\n"),
    "raises_base_exception_subclass": (
        "sum",
        "class Stop(BaseException):\n    def __str__(self):\n        raise self\ndef solve(n):\n    raise Stop()\n",
    ),
    "check_defined_by_candidate": ("range", "def check(candidate):\n    pass\ndef solve(n):\n    return 0\n"),
    "candidate_name_defined": ("range", "def candidate(n):\n    return secret(n)\ndef solve(n):\n    return 0\n"),
}


def assert_task(check: str, prompt: str = PROMPT) -> Task:
    return Task.model_validate(
        {
            "task_id": f"hole/assert-{check}",
            "prompt": prompt,
            "entry_point": "solve",
            "hidden_tests": {"kind": "assert", "code": ("" if check in HELPER_CHECKS else SECRET_DEF) + CHECKS[check]},
            "limits": LIMITS,
        }
    )


@pytest.mark.parametrize("check", list(CHECKS))
def test_honest_solution_passes_every_check(sandbox: Sandbox, check: str) -> None:
    res = grade(sandbox, assert_task(check), HONEST_FOR.get(check, HONEST))
    assert res["status"] == "pass", (check, res)
    assert res["reward"] == 1.0


@pytest.mark.parametrize("attack", list(ASSERT_ATTACKS))
def test_assert_attack_fails(sandbox: Sandbox, attack: str) -> None:
    check, code = ASSERT_ATTACKS[attack]
    assert_fails(grade(sandbox, assert_task(check), code), attack)


def test_check_without_its_helpers_fails_closed(sandbox: Sandbox) -> None:
    """A check whose helper the task does not define gets a NameError, never the candidate's helper."""
    res = grade(
        sandbox,
        assert_task("poly", prompt="def solve(xs):\n    pass\n"),
        HONEST_FOR["poly"] + "def poly(*a):\n    return 0\n",
    )
    assert_fails(res, "no helper")


HUMANEVAL_ATTACKS = {
    # the original check calls the prompt's helper; a candidate that redefines it decides the comparison
    "HumanEval/32": "def poly(xs, x):\n    return 0\ndef find_zero(xs: list):\n    return 12345.0\n",
    "HumanEval/38": "def encode_cyclic(s):\n    return s\ndef decode_cyclic(s):\n    return s\n",
    "HumanEval/50": "def encode_shift(s):\n    return s\ndef decode_shift(s):\n    return s\n",
    # the original check compares the candidate with sort_third (its own name: the candidate's, by design)
    # for three asserts; the literal asserts still decide
    "HumanEval/33": "def sort_third(l):\n    return list(l)\n",
}


@pytest.mark.parametrize("task_id", list(HUMANEVAL_ATTACKS))
def test_humaneval_original_checks_use_the_tasks_helpers(sandbox: Sandbox, task_id: str) -> None:
    problem = next(p for p in load_problems() if p.task_id == task_id)
    task = Task.model_validate(
        {
            "task_id": task_id,
            "prompt": problem.prompt,
            "entry_point": problem.entry_point,
            "hidden_tests": {"kind": "assert", "code": problem.test},
        }
    )
    assert grade(sandbox, task, problem.reference_code)["status"] == "pass"
    assert_fails(grade(sandbox, task, HUMANEVAL_ATTACKS[task_id]), task_id)


# ---- 2. comparison with the reference's own types ---------------------------------------------------------

REFERENCE = textwrap.dedent(
    """
    def solve(kind):
        return {
            "bigint": -9999999999999999,
            "int": 3,
            "float": 1e16,
            "huge": 2**60 + 1,
            "tuple": (1, 2),
            "list": [1, 2],
            "set": {1, 2},
            "frozenset": frozenset({1, 2}),
            "nested": [(1, "a")],
            "intkeys": {1: "a"},
            "tuplekeys": {(1, 2): "a"},
            "bool": True,
            "zero": 0,
            "none": None,
            "halves": 0.5,
            "tagged_key": {"$t": [1, 2]},
        }[kind]
    """
)

#: attack -> (kind asked, what the wrong candidate returns, as source).
COMPARE_ATTACKS: dict[str, tuple[str, str]] = {
    "float_for_bigint": ("bigint", "-1e16"),
    "rounded_float_for_bigint": ("bigint", "float(-9999999999999999)"),
    "integral_float_for_int": ("int", "3.0"),
    "close_float_for_int": ("int", "3.0000001"),
    "int_near_float_reference": ("float", "10**16 + 1"),
    "float_for_huge_int": ("huge", "float(2**60)"),
    "list_for_tuple": ("tuple", "[1, 2]"),
    "tuple_for_list": ("list", "(1, 2)"),
    "list_for_set": ("set", "[1, 2]"),
    "tuple_for_frozenset": ("frozenset", "(1, 2)"),
    "sorted_list_for_set": ("set", "sorted({1, 2})"),
    "lists_inside_for_tuples": ("nested", "[[1, 'a']]"),
    "str_keys_for_int_keys": ("intkeys", "{'1': 'a'}"),
    "bool_keys_for_int_keys": ("intkeys", "{True: 'a'}"),
    "float_keys_for_int_keys": ("intkeys", "{1.0: 'a'}"),
    "list_pairs_for_dict": ("intkeys", "[[1, 'a']]"),
    "string_keys_for_tuple_keys": ("tuplekeys", "{'(1, 2)': 'a'}"),
    "int_for_bool": ("bool", "1"),
    "false_for_zero": ("zero", "False"),
    "zero_for_none": ("none", "0"),
    "empty_for_none": ("none", "[]"),
    "string_for_float": ("halves", "'0.5'"),
    "tag_lookalike_dict": ("tagged_key", "(1, 2)"),
    "tuple_for_tag_lookalike": ("tuple", "{'$t': [1, 2]}"),
    "set_for_set_with_bool": ("set", "{True, 2}"),
}
KINDS = sorted({kind for kind, _ in COMPARE_ATTACKS.values()})


@pytest.fixture(scope="module")
def reference_values(process_sandbox: Sandbox) -> dict[str, Any]:
    """Expected values exactly as the task converters produce them: the reference, run in the sandbox."""
    cases = [CallArgs(id=kind, args=[kind]) for kind in KINDS]
    out = run_call_cases(process_sandbox, REFERENCE, "solve", cases, Limits(timeout_s=5, memory_mb=256))
    assert all(v.ok for v in out.values()), out
    return {kind: v.value for kind, v in out.items()}


def compare_task(kind: str, expected: Any) -> Task:
    return Task.model_validate(
        {
            "task_id": f"hole/compare-{kind}",
            "prompt": "solve(kind)",
            "entry_point": "solve",
            "hidden_tests": {"kind": "call", "cases": [{"args": [kind], "expected": expected}]},
            "limits": LIMITS,
        }
    )


def test_reference_values_keep_their_types(reference_values: dict[str, Any]) -> None:
    assert reference_values["tuple"] == {"$t": [1, 2]}
    assert reference_values["list"] == [1, 2]
    assert reference_values["intkeys"] == {"$d": [[1, "a"]]}
    assert reference_values["tagged_key"] == {"$d": [["$t", [1, 2]]]}
    assert reference_values["bigint"] == -9999999999999999


@pytest.mark.parametrize("kind", KINDS)
def test_reference_passes_its_own_values(sandbox: Sandbox, reference_values: dict[str, Any], kind: str) -> None:
    """Symmetry: the values computed in the process sandbox are met by the reference on every backend."""
    res = grade(sandbox, compare_task(kind, reference_values[kind]), REFERENCE)
    assert res["status"] == "pass", (kind, res)


@pytest.mark.parametrize("attack", list(COMPARE_ATTACKS))
def test_compare_attack_fails(sandbox: Sandbox, reference_values: dict[str, Any], attack: str) -> None:
    kind, value = COMPARE_ATTACKS[attack]
    res = grade(sandbox, compare_task(kind, reference_values[kind]), f"def solve(kind):\n    return {value}\n")
    assert_fails(res, attack)


# ---- 3. a hack flag among many harmless findings ------------------------------------------------------------

#: An honest solution with 70 warn-severity findings, then one hack-severity finding (native code).
NOISY_HACK = HONEST + "def unused():\n" + "".join(f"    open('f{i}')\n" for i in range(70)) + "import ctypes\n"
FLAG_TASK = {
    "task_id": "hole/flags",
    "prompt": "solve(n)",
    "entry_point": "solve",
    "public_tests": {"kind": "call", "cases": [{"args": [1], "expected": secret(1)}]},
    "hidden_tests": {"kind": "call", "cases": [{"args": [n], "expected": secret(n)} for n in (3, 10)]},
    "limits": LIMITS,
}


def test_harmless_findings_never_hide_a_hack_cli_path(sandbox: Sandbox) -> None:
    res = grade(sandbox, Task.model_validate(FLAG_TASK), NOISY_HACK)
    assert res["hidden"] == {"passed": 2, "total": 2}  # it computes the right answers ...
    assert res["reward"] == 0.0  # ... and is still gated
    assert "native_code" in res["flags"]
    assert len(res["static_flags"]) == 64
    assert "native_code" in {f["rule"] for f in res["static_flags"]}
    assert res["static_flag_counts"] == {"file_access": 70, "native_code": 1}


def test_harmless_findings_never_hide_a_hack_pipeline_path(sandbox: Sandbox, tmp_path: Path) -> None:
    registry = TaskRegistry(tmp_path / "tasks")
    registry.store([Task.model_validate(FLAG_TASK)])
    grader = Grader(sandbox, GraderConfig(attempts=2, backoff_s=0.05))
    event = GenerationEvent(
        generation_id="g1", episode_id="g1", run_id="r", task_id="hole/flags", policy_version="p", code=NOISY_HACK
    )
    source = Source("rs.generations", 0, 1)

    def context(role: str) -> RoleContext:
        return RoleContext(role=role, worker="h:1", tasks=TaskSource(registry), artifacts=None, output_topic="o")

    executed = ExecutorHandler(context("executor"), grader).handle(event, source)
    verified = VerifierHandler(context("verifier"), grader).handle(event, source)
    assert isinstance(executed, Done)
    assert isinstance(verified, Done)
    verdict = decode((verified.outputs[0].value or b""), HiddenVerdict)
    assert verdict.passed == verdict.total == 2
    assert verdict.static_flag_counts == {"file_access": 70, "native_code": 1}
    reward = evaluate(load_policy(), Signals(decode((executed.outputs[0].value or b""), ExecutionResult), verdict))
    assert isinstance(reward, Scored)
    assert reward.reward == 0.0
    assert "native_code" in reward.flags
    # an older verdict that only lists what it shows still gates: the first finding of every rule is shown
    shown_only = verdict.model_copy(update={"static_flag_counts": {}})
    again = evaluate(load_policy(), Signals(decode((executed.outputs[0].value or b""), ExecutionResult), shown_only))
    assert isinstance(again, Scored)
    assert again.reward == 0.0


@pytest.mark.parametrize(
    "code",
    [c for _, c in ASSERT_ATTACKS.values()] + [f"x = {v}\n" for _, v in COMPARE_ATTACKS.values()] + [NOISY_HACK],
)
def test_attacks_are_valid_python(code: str) -> None:
    """An attack that does not compile proves nothing (it only fails to load)."""
    compile(code, "attack", "exec", dont_inherit=True)

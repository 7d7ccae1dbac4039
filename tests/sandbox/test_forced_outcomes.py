"""Outcomes a candidate tries to force (issue 16, items 5-6), on every backend.

Nothing a candidate does from inside may produce ``sandbox_error`` (which is retried and withholds the
reward): a reply the harness cannot parse or encode, a reply pipe closed, replaced or flooded, partial
records, lone surrogates in its text. Each must be the candidate's own failure, and every result must be
writable (orjson refuses lone surrogates), also through ``rewardstream grade`` in batch, where one bad line
must never cost the later ones. A property test drives the harness with arbitrary replies and outputs.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rewardstream.cli import grade as grade_cli
from rewardstream.cli.graded import PolicyGrader
from rewardstream.cli.main import _register, app
from schemas.tasks import Task
from streams.reward.policy import load_policy
from tests.sandbox.reward_hacks import HONEST, IO_SHIM, TASKS, secret
from workers.grading import Grader, GraderConfig
from workers.sandbox.api import Sandbox

pytestmark = pytest.mark.sandbox

SECRETS = frozenset(secret(n) for n in (1, 2, 3, 10, 99, 12345))


def grade(sandbox: Sandbox, task: Task, code: str) -> dict[str, Any]:
    graded = PolicyGrader(Grader(sandbox, GraderConfig(attempts=1)), load_policy())
    res = graded.grade(task, code, generation_id="forced").to_json()
    orjson.dumps(res)  # writable: no lone surrogate anywhere
    return res


def assert_candidates_failure(res: dict[str, Any], why: object) -> None:
    assert res["status"] == "fail", (why, res["status"], res["reasons"], res["run"])
    assert res["run"]["attempts"] == 1, (why, res["run"])  # not retried: no infrastructure problem
    assert res["reward"] == 0.0


def forged(body: bytes, *, length: int | None = None, then: str = "return 0", at_import: bool = False) -> str:
    """A candidate that writes one length-prefixed message ``body`` on every fd it can (its reply pipe among
    them) when called (or when loaded), then does ``then``."""
    size = len(body) if length is None else length
    return textwrap.dedent(
        f"""
        import os
        MSG = ({size!r}).to_bytes(4, "big") + {body!r}
        def forge():
            for fd in range(3, 64):
                try:
                    os.write(fd, MSG)
                except OSError:
                    pass
        if {at_import!r}:
            forge()
        def solve(n):
            forge()
            {then}
        """
    )


def reply(value: bytes) -> bytes:
    return b'{"ok":true,"value":' + value + b"}"


#: attack -> candidate code. Replies the harness cannot encode, parse or trust, pipes it cannot use.
FORCED: dict[str, str] = {
    "inf_reply": forged(reply(b"1e999")),
    "negative_inf_reply": forged(reply(b"-1e999")),
    "inf_inside_a_tuple": forged(reply(b'{"$t":[1,1e400]}')),
    "tagged_inf": forged(reply(b'{"$x":"inf"}')),
    "int_too_large": forged(reply(b"1" * 1300)),
    "int_too_long_to_parse": forged(reply(b"9" * 5000)),
    "nested_deeply": forged(reply(b"[" * 150 + b"]" * 150)),
    "nested_past_the_parser": forged(reply(b"[" * 100_000 + b"]" * 100_000)),
    "non_string_keys": forged(reply(b'{"$d":[[[1],2]]}')),
    "unknown_tag": forged(reply(b'{"$q":[1]}')),
    "bare_object": forged(reply(b'{"a":1}')),
    "set_with_a_member_twice": forged(reply(b'{"$s":[1,1]}')),
    "dict_with_a_key_twice": forged(reply(b'{"$d":[["a",1],["a",2]]}')),
    "lone_surrogate_value": forged(reply(b'"\\ud800"')),
    "lone_surrogate_key": forged(reply(b'{"$d":[["\\udfff",1]]}')),
    "lone_surrogate_error": forged(b'{"ok":false,"error":"\\ud800 boom \\udc00"}'),
    "error_that_is_not_text": forged(b'{"ok":false,"error":' + b"[" * 900 + b"]" * 900 + b"}"),
    "invalid_utf8": forged(reply(b'"\xff\xfe\xed\xa0\x80"')),
    "not_json": forged(b"\x00\x01garbage{"),
    "nan_token": forged(reply(b"NaN")),
    "ok_not_a_bool": forged(b'{"ok":"yes","value":0}'),
    "reply_not_an_object": forged(b"[true, 0]"),
    "partial_record_then_exit": forged(reply(b"0"), length=1000, then="os._exit(0)"),
    "partial_record_then_return": forged(reply(b"0"), length=40, then="return 0"),
    "huge_length_claim": forged(b"{", length=0xFFFFFFFF, then="os._exit(0)"),
    "flooded_reply": forged(reply(b'"' + b"x" * (2 << 20) + b'"')),
    "protocol_markers_in_value": forged(reply(b'"\\n@@RS1 ' + b"0" * 32 + b' {\\"done\\": true}\\n\\u2028\\r"')),
    "forged_load_reply": forged(b'{"ok":true,"callables":["solve"]}', at_import=True),
    "forged_load_with_surrogate": forged(b'{"ok":false,"error":"\\ud800"}', at_import=True),
    "closes_every_fd": textwrap.dedent(
        """
        import os
        def solve(n):
            for fd in range(0, 64):
                try:
                    os.close(fd)
                except OSError:
                    pass
            return 0
        """
    ),
    "replaces_the_reply_pipe": textwrap.dedent(
        """
        import os
        def solve(n):
            null = os.open('/dev/null', os.O_WRONLY)
            for fd in range(3, 64):
                if fd != null:
                    try:
                        os.dup2(null, fd)
                    except OSError:
                        pass
            return 0
        """
    ),
    "surrogate_exception": "def solve(n):\n    raise ValueError('\\ud800' * 3 + ' and \\udfff')\n",
    "surrogate_exception_at_import": "raise ImportError('\\ud800')\ndef solve(n):\n    return 0\n",
    "surrogate_syntax_error_at_import": "raise SyntaxError('\\udfff', ('\\ud800.py', 1, 1, '\\ud800'))\n",
    "surrogate_return": "def solve(n):\n    return '\\ud800'\n",
    "surrogate_key_return": "def solve(n):\n    return {'\\ud800': 1}\n",
    "surrogates_on_stdout_and_stderr": textwrap.dedent(
        """
        import sys
        def solve(n):
            sys.stdout.buffer.write('\\ud800'.encode('utf-8', 'surrogatepass'))
            sys.stderr.buffer.write(b'\\xed\\xa0\\x80\\xff')
            sys.stdout.write('\\ud800')
            return 0
        """
    ),
    "repr_and_eq_raise": textwrap.dedent(
        """
        class Bad:
            def __repr__(self):
                raise RuntimeError('\\ud800')
            def __eq__(self, other):
                raise RuntimeError('eq')
            __hash__ = None
        def solve(n):
            return Bad()
        """
    ),
    "exception_whose_str_raises": textwrap.dedent(
        """
        class E(Exception):
            def __str__(self):
                raise E()
        def solve(n):
            raise E()
        """
    ),
    "recursion": "def solve(n):\n    return solve(n)\n",
    "c_stack_overflow": "import sys\nsys.setrecursionlimit(10**7)\ndef solve(n):\n    return solve(n + 1)\n",
    "bytes_return": "def solve(n):\n    return b'\\xff' * 10\n",
    "output_budget": "def solve(n):\n    return ['x' * 250_000] * 31\n",
    "sigint_to_harness": "import os, signal\ndef solve(n):\n    os.kill(os.getppid(), signal.SIGINT)\n    return 0\n",
    "sigterm_to_harness": "import os, signal\ndef solve(n):\n    os.kill(os.getppid(), signal.SIGTERM)\n    return 0\n",
}


@pytest.mark.parametrize("attack", list(FORCED))
def test_attacks_are_valid_python(attack: str) -> None:
    """An attack that does not compile proves nothing (it only fails to load)."""
    compile(FORCED[attack], attack, "exec", dont_inherit=True)


@pytest.mark.parametrize("kind", list(TASKS))
@pytest.mark.parametrize("attack", list(FORCED))
def test_forced_outcome_is_the_candidates_failure(sandbox: Sandbox, attack: str, kind: str) -> None:
    code = FORCED[attack] + (IO_SHIM if kind == "io" else "")
    assert_candidates_failure(grade(sandbox, TASKS[kind](), code), attack)


def test_honest_solution_still_passes_after_forced_outcomes(sandbox: Sandbox) -> None:
    for kind in TASKS:
        res = grade(sandbox, TASKS[kind](), HONEST + (IO_SHIM if kind == "io" else ""))
        assert res["status"] == "pass", res


def test_grade_batch_writes_every_line(sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``rewardstream grade`` in batch: surrogate-laden results and a grader failure each get their own line."""

    class Shared:  # the session's backend, kept open after the command
        name = "shared"

        def run(self, spec: Any) -> Any:
            return sandbox.run(spec)

        def close(self) -> None:
            pass

    monkeypatch.setattr(grade_cli, "open_sandbox", lambda _settings, _backend: Shared())
    original_grade = Grader.grade

    def grade_or_raise(self: Grader, task: Task, code: str, *, generation_id: str = "", **kw: Any) -> Any:
        if generation_id == "grader-bug":
            raise RuntimeError("the grader itself broke \ud800")
        return original_grade(self, task, code, generation_id=generation_id, **kw)

    monkeypatch.setattr(Grader, "grade", grade_or_raise)
    task = TASKS["call"]()
    (tmp_path / "tasks.jsonl").write_bytes(orjson.dumps(task.model_dump(mode="json", by_alias=True)) + b"\n")
    sols = [("s1", FORCED["surrogate_exception"]), ("s2", FORCED["lone_surrogate_error"]), ("grader-bug", HONEST)]
    sols += [("s3", FORCED["surrogate_exception_at_import"]), ("s4", HONEST)]
    (tmp_path / "sols.jsonl").write_bytes(
        b"".join(orjson.dumps({"task_id": task.task_id, "generation_id": g, "code": c}) + b"\n" for g, c in sols)
    )
    _register()
    out = tmp_path / "results.jsonl"
    args = ["grade", "--tasks", str(tmp_path / "tasks.jsonl"), "--solutions", str(tmp_path / "sols.jsonl")]
    result = CliRunner().invoke(app, [*args, "--out", str(out), "--concurrency", "2"])
    lines = {rec["generation_id"]: rec for rec in map(orjson.loads, out.read_bytes().splitlines())}
    assert set(lines) == {g for g, _ in sols}, result.output
    assert lines["s4"]["status"] == "pass"
    assert {lines[g]["status"] for g in ("s1", "s2", "s3")} == {"fail"}
    assert lines["grader-bug"]["status"] == "sandbox_error"  # our failure, said in its own line
    assert result.exit_code == 1  # ... and in the exit code


# ---- the property: arbitrary replies and outputs never become sandbox_error --------------------------------

NASTY_VALUES = [
    b"1e999", b"-1e999", b"1" * 1300, b"9" * 5000, b'"\\ud800"', b'"\\udfff\\ud800x"', b"[" * 150 + b"]" * 150,
    b'{"$x":"inf"}', b'{"$d":[[[1],2]]}', b'{"$s":[1,1]}', b'{"$t":5}', b'{"$d":[["\\ud800",1]]}', b"NaN",
    b"Infinity", b"-0.0", b"true", b"null", b'{"$f":[{"$s":[]}]}', b'"\\n@@RS1 ' + b"0" * 32 + b' {\\"done\\":true}"',
]  # fmt: skip

json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers().filter(lambda v: v not in SECRETS),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_leaves,
    lambda kids: st.lists(kids, max_size=4)
    | st.dictionaries(st.sampled_from(["$t", "$s", "$f", "$d", "$x", "ok", "value", "a"]) | st.text(max_size=4), kids,
                      max_size=3),
    max_leaves=10,
)  # fmt: skip
value_texts = st.one_of(st.sampled_from(NASTY_VALUES), json_values.map(lambda v: json.dumps(v).encode()))


@st.composite
def reply_bodies(draw: st.DrawFn) -> bytes:
    """What a candidate may write on its reply pipe: a success or an error carrying a nasty value, a reply
    put together from parts, or any bytes."""
    shape = draw(st.sampled_from(["value", "error", "parts", "parts", "bytes"]))
    if shape == "value":
        return b'{"ok":true,"value":' + draw(value_texts) + b"}"
    if shape == "error":
        return b'{"ok":false,"error":' + draw(value_texts) + b"}"
    if shape == "bytes":
        return bytes(draw(st.binary(max_size=64)))
    ok = draw(st.sampled_from([b"true", b"false", b'"yes"', b"1", b"null"]))
    parts = [b'"ok":' + ok]
    if draw(st.booleans()):
        parts.append(b'"value":' + draw(value_texts))
    if draw(st.booleans()):
        parts.append(b'"error":' + draw(value_texts))
    return b"{" + b",".join(parts) + b"}"


python_values = st.one_of(
    st.sampled_from(
        [
            "float('inf')",
            "float('nan')",
            "10**2000",
            "(1, (2,))",
            "{1, 2}",
            "{1: 'a'}",
            "'\\ud800'",
            "b'x'",
            "[[[[]]]]",
            "object()",
            "iter([1])",
            "{'$t': [1]}",
            "frozenset({(1, 2)})",
            "[0] * 300_000",
            "-0.0",
        ]
    ),
    json_values.map(repr),
)


@st.composite
def acts(draw: st.DrawFn) -> dict[str, Any]:
    """One thing a candidate does when called: writes anything to its outputs and reply pipe, then returns
    a value, raises, closes its fds or exits."""
    forged_reply: bytes | None = draw(st.none() | reply_bodies())
    message = None
    if forged_reply is not None:
        length = draw(st.sampled_from([len(forged_reply)] * 3 + [0, 3, 1 << 30]))
        message = length.to_bytes(4, "big") + forged_reply
    return {
        "forged": message,
        "out": draw(st.binary(max_size=80))
        + draw(st.sampled_from([b"", b"\n@@RS1 " + b"0" * 32 + b' {"done":true}\n'])),
        "err": draw(st.binary(max_size=40)),
        "message": draw(st.text(max_size=20)) + draw(st.sampled_from(["\ud800", "", "\udfff\ud800"])),
        "mode": draw(st.sampled_from(["raise", "return", "exit", "return", "close", "exit0"])),
        "value": draw(python_values),
    }


@st.composite
def behaviours(draw: st.DrawFn) -> str:
    """A candidate program: ``solve(n)`` does one of a few acts, chosen by ``n`` (so one run meets several),
    and loading it may do one too."""
    chosen = draw(st.lists(acts(), min_size=2, max_size=4))
    at_import = draw(st.booleans())
    table = ",\n    ".join(
        f"({a['forged']!r}, {a['out']!r}, {a['err']!r}, {a['message']!r}, {a['mode']!r}, lambda: {a['value']})"
        for a in chosen
    )
    return (
        textwrap.dedent(
            """
        import os, sys
        ACTS = [
            {table},
        ]
        def act(i):
            forged, out, err, message, mode, value = ACTS[i % len(ACTS)]
            sys.stdout.flush()
            os.write(1, out)
            os.write(2, err)
            if forged is not None:
                for fd in range(3, 64):
                    try:
                        os.write(fd, forged)
                    except OSError:
                        pass
            if mode == "close":
                for fd in range(3, 64):
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            if mode == "exit":
                os._exit(3)
            if mode == "exit0":
                os._exit(0)
            if mode == "raise":
                raise ValueError(message)
            return value()
        if {at_import}:
            act(0)
        def solve(n):
            return act(n)
        if __name__ == "__main__":
            print(solve(int(input())))
        """
        )
        .replace("{table}", table)
        .replace("{at_import}", repr(at_import))
    )


#: A public call suite and a hidden assert suite (both reply paths) in one run, with short deadlines.
PROPERTY_TASKS = {
    "call+assert": Task.model_validate(
        {
            **TASKS["assert"]().model_dump(mode="json", by_alias=True),
            "task_id": "forced/property",
            "limits": {"timeout_s": 1, "memory_mb": 256},
        }
    ),
    "io": Task.model_validate(
        {**TASKS["io"]().model_dump(mode="json", by_alias=True), "limits": {"timeout_s": 1, "memory_mb": 256}}
    ),
}
#: Examples per backend (each one is a sandbox run); the pure-logic property tests run many more.
SANDBOX_EXAMPLES = 60


@settings(
    max_examples=SANDBOX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(code=behaviours())
def test_arbitrary_replies_and_outputs_are_never_sandbox_error(sandbox: Sandbox, code: str) -> None:
    compile(code, "candidate", "exec", dont_inherit=True)  # the generator writes valid programs
    for task in PROPERTY_TASKS.values():
        res = grade(sandbox, task, code)
        assert res["status"] == "fail", (res["status"], res["reasons"], res["run"], code)
        assert res["run"]["attempts"] == 1

"""One mechanism ships every guest program (issue 25): the loader reads the program from the run's stdin and
runs it; every launch of the host goes through it."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from workers.episodes.snapshot import Caps, pack
from workers.episodes.step import StepAction, StepLimits, build_spec, step_runner
from workers.grading.suites import build_spec as harness_spec
from workers.grading.suites import harness_program, new_nonce
from workers.languages.steps import Step, driver_program
from workers.languages.steps import StepLimits as LanguageLimits
from workers.languages.steps import _spec as language_spec
from workers.sandbox.docker_config import INIT, INIT_ARGV
from workers.sandbox.guest_program import DEFAULT_PYTHON, LOADER, GuestProgram, bare_source, guest_program
from workers.sandbox.guest_source import program_source

#: Says how it was run: its argv, its ``__file__``, whether it is ``__main__``, and the stdin left for it.
ECHO = b"""from __future__ import annotations
import json, os, sys
rest = os.read(0, 1 << 16)
print(json.dumps({"argv": sys.argv, "file": __file__, "main": __name__ == "__main__", "rest": rest.decode()}))
"""


def load(program: GuestProgram, stdin: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    """``program`` launched as the host launches every guest program, on this interpreter."""
    argv = program.argv((sys.executable, "-I", "-S", "-B"), *args)
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=60, check=False)


def test_the_loader_runs_the_bytecode_and_leaves_the_rest_of_stdin_to_the_program() -> None:
    program = GuestProgram.compiled("echo.py", ECHO)
    done = load(program, program.stdin(b"the program's own input"), "a", "b c")
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said == {"argv": ["echo.py", "a", "b c"], "file": "echo.py", "main": True, "rest": "the program's own input"}


def test_the_loader_compiles_the_source_when_the_bytecode_is_another_interpreters() -> None:
    """Bytecode of another magic (the sandbox's python3 is another version) is never loaded: here it is not
    even bytecode, so only a compiled source can print."""
    program = GuestProgram("echo.py", ECHO, b"\xff" * 16 + b"not marshal data")
    done = load(program, program.stdin(b"x"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rest"] == "x"


@pytest.mark.parametrize("cut", [1, 20, len(ECHO) // 2])
def test_a_short_program_on_stdin_runs_nothing(cut: int) -> None:
    program = GuestProgram.compiled("echo.py", ECHO)
    done = load(program, program.stdin()[:-cut])
    assert done.returncode == 1
    assert done.stdout == b""
    assert b"echo.py: short program on stdin" in done.stderr


def test_a_shipped_program_is_spliced_and_compiled_once() -> None:
    harness = guest_program("harness.py")
    assert harness is guest_program("harness.py")
    assert b"\nfrom workers." not in harness.source
    assert harness.bytecode[16:]  # marshalled code after the 16-byte magic


def test_every_launch_of_a_guest_program_is_the_loader_with_the_program_first_on_stdin(tmp_path: Path) -> None:
    """The harness, the step runner, the language driver and the container's init: each one's command is the
    loader, each one's stdin begins with its program. (The two servers are started the same way: their
    launches are covered by the sandbox tests that start them.)"""
    harness = harness_program()
    one_shot = harness_spec(code="", entry_point="f", suites=[], memory_mb=64, startup_grace_s=1.0,
                            harness=harness, nonce=new_nonce())  # fmt: skip
    empty = pack(tmp_path, Caps()).data
    step = build_spec(empty, StepAction.exec("true"), Caps(), StepLimits(), new_nonce())
    step_of_a_language = Step(toolchain="native", argv=("true",), files={})
    limits = LanguageLimits(timeout_s=1.0, memory_mb=64)
    language = language_spec(step_of_a_language, limits, driver_program(), new_nonce())
    launches = [(one_shot, harness), (step, step_runner()), (language, driver_program())]
    for spec, program in launches:
        assert spec.argv[: len(DEFAULT_PYTHON) + 2] == (*DEFAULT_PYTHON, "-c", LOADER)
        assert spec.argv[len(DEFAULT_PYTHON) + 2] == program.name
        assert spec.stdin.startswith(program.stdin())
        assert not {"harness.py", "step_runner.py", "driver.py"} & set(spec.files)
    assert INIT_ARGV[:6] == ["/usr/bin/python3", "-I", "-S", "-B", "-c", LOADER]
    assert INIT_ARGV[6] == INIT.name == "container_init.py"


def test_the_loader_ships_bare_and_the_same_code() -> None:
    """``ps`` shows the ``-c`` source of every guest process: the code only, compiled to what the module is."""
    module = program_source("loader.py")
    assert len(LOADER) < len(module) // 2
    assert '"""' not in LOADER
    assert "#" not in LOADER
    assert ast.dump(ast.parse(LOADER)) == ast.dump(ast.parse(bare_source(module)))
    assert ast.dump(ast.parse(LOADER).body[-1]) == ast.dump(ast.parse(module).body[-1])


def test_bare_source_keeps_a_body_that_was_only_a_docstring() -> None:
    bare = bare_source(b'"""m"""\ndef f():\n    """only this"""\nclass C:\n    """d"""\n    x = 1  # c\n')
    namespace: dict[str, object] = {}
    exec(compile(bare, "bare", "exec"), namespace)  # noqa: S102 - a literal of this test
    assert "only" not in bare
    assert "#" not in bare
    assert namespace["f"]() is None  # type: ignore[operator]

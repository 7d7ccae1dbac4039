"""How the host ships a guest program into a sandbox: one loader, the program on the run's stdin.

Every launch is ``python3 -I -S -B -c LOADER NAME PYC SRC ARGS...`` with the program's bytecode and source
ahead of its own stdin (``guest.loader`` says why). The source is the guest module with the guest modules it
imports spliced in (``guest_source``); the bytecode is compiled here once per process, by this interpreter,
and used in the sandbox only when its interpreter has the same bytecode magic.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import marshal
from collections.abc import Sequence
from dataclasses import dataclass

from workers import python_ast
from workers.sandbox.guest_source import program_source

#: What every guest program runs under: ``-I`` ignores PYTHON* variables, the user site and the work dir on
#: sys.path; ``-S`` skips site-packages .pth processing; ``-B`` writes no bytecode.
PYTHON_FLAGS: tuple[str, ...] = ("-I", "-S", "-B")
#: The sandbox's interpreter with those flags (a grader or step may be configured with another).
DEFAULT_PYTHON: tuple[str, ...] = ("python3", *PYTHON_FLAGS)


def bare_source(source: bytes) -> str:
    """``source`` without its docstrings and comments: what a ``-c`` argument carries, as ``ps`` shows it for
    every guest process, should be the code only."""
    tree = python_ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and _is_docstring(body[0]):
            body[:1] = [] if len(body) > 1 else [ast.Pass()]
    return ast.unparse(tree)


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


#: The ``-c`` source of every launch (bare: ``guest.loader`` documents it).
LOADER = bare_source(program_source("loader.py"))


@dataclass(frozen=True, slots=True)
class GuestProgram:
    """A guest program as shipped: its file name, its spliced source and this interpreter's bytecode of it."""

    name: str
    source: bytes
    bytecode: bytes

    @classmethod
    def compiled(cls, name: str, source: bytes) -> GuestProgram:
        """``source`` under ``name``, with this interpreter's bytecode magic (16 bytes, zero-padded) and code."""
        code = compile(source, name, "exec", dont_inherit=True)
        return cls(name, source, importlib.util.MAGIC_NUMBER.ljust(16, b"\0") + marshal.dumps(code))

    def argv(self, python: Sequence[str], *args: str) -> tuple[str, ...]:
        """The command that runs this program with ``args`` on ``python`` (an interpreter and its flags)."""
        return (*python, "-c", LOADER, self.name, str(len(self.bytecode)), str(len(self.source)), *args)

    def stdin(self, data: bytes = b"") -> bytes:
        """The run's stdin: this program, then ``data``, the program's own input."""
        return b"".join((self.bytecode, self.source, data))


@functools.cache
def guest_program(file: str) -> GuestProgram:
    """The guest program ``file`` (``harness.py``) of the guest package, spliced and compiled once."""
    return GuestProgram.compiled(file, program_source(file))

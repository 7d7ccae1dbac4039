"""The source of an in-sandbox program as it is shipped: the guest modules it imports spliced in.

Why: the programs that run inside the sandbox (the grading harness, the language driver, the episode step
runner) start as one source text on the sandbox image's interpreter, with no path to import our packages
from. What they share (``guest.clock``, the time limit) is written once in the guest package,
imported normally on the host, and spliced in place of its import line when the program is shipped. A spliced
module's own guest imports are spliced the same way, each module once (at its first import line): the program
runs in one globals dict, so a module's state (a registry, a bound function) stays one object, as on the host.
"""

from __future__ import annotations

import functools
from importlib import resources

#: The package of the guest modules: a shipped program's top-level ``from <GUEST>.<module> import ...`` line
#: is replaced by that module's source.
GUEST = "guest"
#: The one ``__future__`` import a spliced module may hold: every program holds it too, first (a test checks),
#: so the line is dropped where the module lands (it is legal only at the top of a program).
FUTURE = b"from __future__ import annotations\n"


@functools.cache
def _module_source(name: str) -> bytes:
    return resources.files(GUEST).joinpath(f"{name}.py").read_bytes()


def guest_module(name: str) -> str | None:
    """The guest module (``clock``) a top-level import line's module name (``guest.clock``)
    names, or None for any other module."""
    package, _, module = name.rpartition(".")
    return module if package == GUEST and module.isidentifier() else None


def _spliced(line: bytes) -> str | None:
    """The guest module a line imports from, if it is a top-level ``from <guest module> import ...`` line."""
    words = line.split()
    if len(words) >= 4 and words[0] == b"from" and words[2] == b"import" and not line[:1].isspace():
        return guest_module(words[1].decode())
    return None


def _splice(source: bytes, done: set[str]) -> bytes:
    """``source`` with its guest import lines replaced by the modules they name (spliced in turn); a module
    in ``done`` is there already, so its line is dropped."""
    out: list[bytes] = []
    lines = iter(source.splitlines(keepends=True))
    for line in lines:
        module = _spliced(line)
        if module is None:
            out.append(line)
            continue
        names = line
        while b"(" in line and b")" not in names:  # ``ruff format`` wraps a long import: its names end at ")"
            names = next(lines)
        if module not in done:
            done.add(module)
            body = _splice(_module_source(module), done).rstrip(b"\n") + b"\n"
            out.extend(kept for kept in body.splitlines(keepends=True) if kept != FUTURE)
    return b"".join(out)


def guest_source(source: bytes) -> bytes:
    """``source`` with every top-level ``from <guest module> import ...`` line replaced by that module's code,
    itself spliced the same way, each module once."""
    return _splice(source, set())


def program_source(file: str) -> bytes:
    """The guest program ``file`` (``harness.py``) of the guest package as it is shipped: ``guest_source``."""
    return guest_source(resources.files(GUEST).joinpath(file).read_bytes())

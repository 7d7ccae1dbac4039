"""The source of an in-sandbox program as it is shipped: the guest modules it imports spliced in.

Why: the programs that run inside the sandbox (the grading harness, the language driver, the episode step
runner) start as one source text on the sandbox image's interpreter, with no path to import our packages
from. What they share (``workers.sandbox.guest.clock``, the time limit) is written once in the guest package,
imported normally on the host, and spliced in place of its import line when the program is shipped.
"""

from __future__ import annotations

import functools
from importlib import resources

#: The package of the guest modules: a shipped program's top-level ``from <GUEST>.<module> import ...`` line
#: is replaced by that module's source.
GUEST = "workers.sandbox.guest"


@functools.cache
def _module_source(name: str) -> bytes:
    return resources.files(GUEST).joinpath(f"{name}.py").read_bytes()


def guest_module(name: str) -> str | None:
    """The guest module (``clock``) a top-level import line's module name (``workers.sandbox.guest.clock``)
    names, or None for any other module."""
    package, _, module = name.rpartition(".")
    return module if package == GUEST and module.isidentifier() else None


def guest_source(source: bytes) -> bytes:
    """``source`` with every top-level ``from <guest module> import ...`` line replaced by that module's code."""
    out: list[bytes] = []
    for line in source.splitlines(keepends=True):
        words = line.split()
        if len(words) >= 4 and words[0] == b"from" and words[2] == b"import" and not line[:1].isspace():
            module = guest_module(words[1].decode())
            if module is not None:
                out.append(_module_source(module).rstrip(b"\n") + b"\n")
                continue
        out.append(line)
    return b"".join(out)


def program_source(file: str) -> bytes:
    """The guest program ``file`` (``harness.py``) of the guest package as it is shipped: ``guest_source``."""
    return guest_source(resources.files(GUEST).joinpath(file).read_bytes())

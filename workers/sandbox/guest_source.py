"""The source of an in-sandbox program as it is shipped: the guest modules it imports spliced in.

Why: the programs that run inside the sandbox (the grading harness, the language driver, the episode step
runner) start as one source text on the sandbox image's interpreter, with no path to import our packages
from. What they share (``guest_clock``, the time limit) is written once, imported normally on the host, and
spliced in place of its import line when the program is shipped.
"""

from __future__ import annotations

import functools
from importlib import resources

#: The guest modules a shipped program may import, by their import line's module name.
GUEST_MODULES = {"workers.sandbox.guest_clock": "guest_clock.py"}


@functools.cache
def _module_source(name: str) -> bytes:
    return resources.files("workers.sandbox").joinpath(GUEST_MODULES[name]).read_bytes()


def guest_source(source: bytes) -> bytes:
    """``source`` with every top-level ``from <guest module> import ...`` line replaced by that module's code."""
    out: list[bytes] = []
    for line in source.splitlines(keepends=True):
        words = line.split()
        if len(words) >= 4 and words[0] == b"from" and words[2] == b"import" and not line[:1].isspace():
            name = words[1].decode()
            if name in GUEST_MODULES:
                out.append(_module_source(name).rstrip(b"\n") + b"\n")
                continue
        out.append(line)
    return b"".join(out)

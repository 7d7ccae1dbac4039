"""How the in-sandbox servers are shipped: their sources, read from the guest package (``workers.sandbox.guest``)
with the guest modules they import spliced in (``guest_source``, as for every guest program), run by the
sandbox's own python3 in one globals dict (``boot_common`` first, then the server's main), never imported by the
worker."""

from __future__ import annotations

from workers.sandbox.guest_source import program_source

BOOT_COMMON = "boot_common.py"


def boot_source(name: str) -> str:
    """The source of a guest module that runs inside a sandbox (``boot_common``, a server's main)."""
    return program_source(name).decode("utf-8")


def boot_program(main: str) -> str:
    """A ``python3 -c`` program that runs ``boot_common`` and then ``main`` in its own (``__main__``) globals,
    both under their file names: how the fork server gets the code it shares with the docker entry server."""
    return "".join(f"exec(compile({boot_source(name)!r}, {name!r}, 'exec'))\n" for name in (BOOT_COMMON, main))

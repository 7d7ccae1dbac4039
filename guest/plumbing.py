"""The fd and ``prctl`` plumbing the in-sandbox programs share, written once.

Guest code: standard library only (it is spliced, by ``workers.sandbox.guest_source``, into the programs that
import it, after their own imports: the step runner, the language driver, the harness, and ``boot_common`` for
the in-sandbox servers). The host imports it as a module (``workers.sandbox.run_spec``).

Not here on purpose: the harness's own ``bound_write_all`` writes with ``os.write`` as bound before any
candidate code runs; the driver's ``_prctl`` and ``boot_common.prctl`` pass the argument as an unsigned long and
the latter raises on failure. Those differ in behaviour, so they stay with their programs (with the ``PR_*``
options from here).
"""

from __future__ import annotations

import binascii
import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

#: ``prctl`` options the in-sandbox programs use.
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write all of ``data`` to ``fd`` (a pipe or socket may take less than asked per write)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_all(fd: int) -> bytes:
    """Everything ``fd`` has until its end of file."""
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def read_exact_into(fd: int, buf: bytearray) -> int:
    """Fill ``buf`` from ``fd`` with the kernel copying straight into it (no intermediate bytes objects); the
    bytes read, fewer than ``len(buf)`` only at end of file."""
    view = memoryview(buf)
    got = 0
    while got < len(buf):
        n = os.readv(fd, [view[got:]])
        if n == 0:
            break
        got += n
    return got


def b64(data: bytes | bytearray) -> str:
    """``data`` as base64 text (how binary output travels in a JSON record)."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def prctl_ok(option: int, arg: int) -> bool:
    """``prctl(option, arg)`` via libc; False when it failed or is unavailable (the caller reports it)."""
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)) == 0
    except Exception:
        return False


def become_subreaper() -> bool:
    """Make this process the child subreaper of everything it starts (``clock.run_tree``; orphans are
    reparented to it, not to pid 1); False if it could not."""
    return prctl_ok(PR_SET_CHILD_SUBREAPER, 1)


def make_executable(names: list[str]) -> None:
    """chmod +x each named regular file of the work dir (never through a link); a missing one is skipped:
    running it then fails, the program's failure."""
    for name in names:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if os.path.isfile(f"/proc/self/fd/{fd}"):
                os.fchmod(fd, 0o755)
        finally:
            os.close(fd)


def run_and_exit(main: Callable[[list[str]], int]) -> NoReturn:
    """End the process with ``main(sys.argv)``'s status (2 if it raised), at once: ``os._exit``, so nothing
    else (an atexit hook, a finalizer) runs after the program."""
    code = 2
    try:
        code = main(sys.argv)
    finally:
        os._exit(code)

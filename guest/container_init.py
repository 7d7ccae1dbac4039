"""pid 1 of every sandbox container (``docker_config.INIT``): it makes itself non-dumpable, then sleeps.

Why: a process of the sandbox uid (a run) can then no longer ptrace it, open its ``mem``, ``maps``, ``smaps``,
``pagemap``, ``environ``, ``fd/*``, nor write its ``clear_refs``, ``oom_score_adj``, ``coredump_filter`` (those
/proc files become root's): nothing a run does to it (its memory, its pages' present/soft-dirty/referenced bits)
can reach the next run through it. It cannot exec ``sleep`` afterwards (``execve`` makes a process dumpable
again). SIGINT, the only signal python catches, gets its default back: a pid namespace's init ignores every
signal it has no handler for, so a run cannot end it (nor the container with it). It exits (70) if ``prctl``
fails; the container is then never used.

Guest code (standard library only): shipped with ``workers.sandbox.guest_source`` as the image's own
``python3 -I -S -B -c <this source> <seconds>``.
"""

from __future__ import annotations

import signal
import sys
import time

from guest.plumbing import PR_SET_DUMPABLE, prctl_ok

#: The exit status of an init that could not make itself non-dumpable.
NOT_HARDENED = 70


def main(argv: list[str]) -> int:
    """Harden, then sleep for ``argv[1]`` seconds (the container's lifetime); ``NOT_HARDENED`` at once if the
    ``prctl`` failed."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if not prctl_ok(PR_SET_DUMPABLE, 0):
        return NOT_HARDENED
    time.sleep(float(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

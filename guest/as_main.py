"""A program's text run as ``__main__`` in this interpreter, ending with the exit status CPython would give it.

Why: the in-process harness of the fork server (``boot_common.run_program``: a ``python3 -c`` program without a
new interpreter) and an io case of the grading harness (``io_suite``: the candidate's program in a forked child)
both run a program as ``__main__`` and must report the status ``python3`` itself would have.

Guest code (standard library only), spliced into the programs that import it.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Callable


def main_status(run: Callable[[], object]) -> int:
    """``run()``'s exit status as CPython gives it: 0; a ``SystemExit``'s code (its low byte, 1 for a code that
    is not an int, 0 for none); 1 after printing the traceback of any other exception; 1 when stdout or
    stderr cannot be flushed after a status of 0."""
    status = 0
    try:
        run()
    except SystemExit as exc:
        status = 0 if exc.code is None else (exc.code & 0xFF if type(exc.code) is int else 1)
    except BaseException:
        import traceback  # only once a program raised (start-up cost; the fork server has it loaded)

        traceback.print_exc()
        status = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        status = status or 1
    return status

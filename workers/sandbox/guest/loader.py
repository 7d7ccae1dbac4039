"""The one loader of every guest program: ``python3 -I -S -B -c <this source> NAME PYC SRC ARGS...``.

Why one: every program that runs inside a sandbox (the grading harness, the language driver, the episode step
runner, the in-sandbox servers, the container's init) reaches it the same way, so there is one place to reason
about what the sandbox runs and when. The program comes first on stdin, ahead of the program's own input: PYC
bytes of bytecode (this interpreter's bytecode magic, 16 bytes zero-padded, then the marshalled code: ~0.1 ms to
load where compiling costs milliseconds), then SRC bytes of source, compiled when the sandbox's interpreter has
another magic (or PYC is 0). Exactly those bytes are read (``os.readv`` on fd 0, no buffer), so what follows on
stdin stays the program's. The program runs as ``__main__`` under NAME with ``sys.argv = [NAME, *ARGS]``; a short
stdin ends the run with status 1 before anything runs. The fork server's fast path runs this source in-process
(``boot_common.run_program``), so a forked run pays no interpreter start-up.

Guest code (standard library only), the ``-c`` source of every launch (``workers.sandbox.guest_program``).
"""

import _frozen_importlib_external as e
import marshal
import os
import sys

if __name__ == "__main__":
    n, p, s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    b = bytearray(p + s)
    v = memoryview(b)
    g = 0
    while g < len(b):
        k = os.readv(0, [v[g:]])
        if k == 0:
            sys.exit(f"{n}: short program on stdin ({g} of {len(b)} bytes)")
        g += k
    c = (
        marshal.loads(b[16:p])  # noqa: S302 - the host's own bytecode, read before anything of the run ran
        if p > 16 and b[:16] == e.MAGIC_NUMBER.ljust(16, b"\0")
        else compile(bytes(b[p:]), n, "exec", dont_inherit=True)
    )
    del v, b
    sys.argv = [n, *sys.argv[4:]]
    exec(c, {"__name__": "__main__", "__builtins__": __builtins__, "__file__": n})  # noqa: S102

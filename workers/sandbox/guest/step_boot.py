"""The episode step runner's loader, run as ``python3 -I -S -B -c <this source> PYC SRC JOB`` in the workspace.

Why a loader, and why on stdin: the work dir holds nothing but the workspace, so the runner comes at the start
of stdin, its bytecode (``PYC`` bytes: the bytecode magic, 16 bytes zero-padded, then the marshalled code) and
its source (``SRC`` bytes); the bytecode runs when this interpreter has the same magic, else the source is
compiled. The ``JOB`` bytes after them are the runner's own stdin (it reads them itself).

Guest code (standard library only), shipped by ``workers.sandbox.guest_source`` as the ``-c`` source.
"""

import _frozen_importlib_external as e
import marshal
import os
import sys

if __name__ == "__main__":
    p, s = int(sys.argv[1]), int(sys.argv[2])
    b = bytearray(p + s)
    v = memoryview(b)
    g = 0
    while g < len(b):
        k = os.readv(0, [v[g:]])
        if k == 0:
            break
        g += k
    c = (
        marshal.loads(b[16:p])  # noqa: S302 - the host's own bytecode, read before any command ran
        if b[:16] == e.MAGIC_NUMBER.ljust(16, b"\0")
        else compile(bytes(b[p:]), "step_runner.py", "exec", dont_inherit=True)
    )
    del v, b
    sys.argv = ["step_runner.py", sys.argv[3]]
    exec(c, {"__name__": "__main__", "__builtins__": __builtins__, "__file__": "step_runner.py"})  # noqa: S102

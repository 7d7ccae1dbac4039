"""The grading harness's loader, run as ``python3 -I -S -B -c <this source> NBYTES N_ASSERT`` in the work dir.

Why a loader: it runs the harness bytecode the grader compiled (``harness.rspyc``: the bytecode magic, 16 bytes
zero-padded, then the marshalled code) when this interpreter has the same bytecode magic, else compiles the
harness's source (``harness.py``): compiling the harness costs ~8 ms per run, reading the bytecode ~0.1 ms.

Guest code (standard library only), shipped by ``workers.sandbox.guest_source`` as the ``-c`` source.
"""

import _frozen_importlib_external as e
import marshal
import sys

if __name__ == "__main__":
    d = open("harness.rspyc", "rb").read()  # noqa: SIM115 - closed when the loader's globals go
    c = (
        marshal.loads(d[16:])  # noqa: S302 - the grader's own bytecode, written before any candidate ran
        if d[:16] == e.MAGIC_NUMBER.ljust(16, b"\0")
        else compile(open("harness.py", "rb").read(), "harness.py", "exec", dont_inherit=True)  # noqa: SIM115
    )
    sys.argv[0] = "harness.py"
    exec(c, {"__name__": "__main__", "__builtins__": __builtins__, "__file__": "harness.py"})  # noqa: S102

"""The docker entry server's loader, run as ``python3 -I -S -B -c <this source> A,B ...`` in the container.

Why on stdin: the server's code is not put on the command line, which the container can read. Its stdin holds
``boot_common`` (A bytes), then ``docker_entry_main`` (B bytes), run in one globals dict; the rest of stdin is
the server's ``INPUT``.

Guest code (standard library only), shipped by ``workers.sandbox.guest_source`` as the ``-c`` source. No
``from __future__`` import here: the two sources are compiled with this loader's flags, none.
"""

import sys

if __name__ == "__main__":
    d = sys.stdin.buffer.read()
    a, b = (int(x) for x in sys.argv[1].split(","))
    g = {"__name__": "__main__", "INPUT": d[a + b :]}
    exec(compile(d[:a], "boot_common.py", "exec"), g)  # noqa: S102
    exec(compile(d[a : a + b], "docker_entry_main.py", "exec"), g)  # noqa: S102

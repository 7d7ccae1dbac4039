"""Hostile programs in C, C++, Go, Rust, Java, Node, D, C# (mono), Kotlin, Scala and R, for
``test_language_containment``.

Each one first probes the sandbox and prints ``name=result`` per attempt, where ``0`` means the attempt
WORKED (what must never happen) and anything else is why it failed (an errno or an exception's name): raw
syscalls (unshare, mount, ptrace, bpf, io_uring, perf_event_open, keyctl, setns) where the language can make
them, a connection to a listener on the host's loopback and an outbound one, a host file named by a secret
and /etc/shadow, the worker's environment, writes outside the work dir, setuid. Then it starts threads until
it is refused (``threads=N``) and forks until the run's deadline (a fork bomb; Go forks first, then makes
OS threads until its runtime dies). Templates take ``{PORT}``,
``{SECRET}`` (a host path) and the syscall numbers ``{NR_<name>}`` of the machine.
"""

from __future__ import annotations

from collections.abc import Mapping

from tests.sandbox.hostile_managed import CSHARP, JAVA, KOTLIN, NODE, SCALA, R
from tests.sandbox.hostile_native import GO, RUST, C, D

#: The probe every language makes (names), beyond its own extras.
COMMON = ("connect_host", "connect_out", "read_secret", "read_shadow", "env_secret", "write_etc", "write_root",
          "write_usr")  # fmt: skip
RAW = ("unshare_user", "unshare_mount", "mount", "ptrace", "bpf", "io_uring_setup", "perf_event_open", "keyctl")

HOSTILE: dict[str, tuple[str, tuple[str, ...]]] = {
    "c": (C, (*COMMON, *RAW, "setns", "setuid")),
    "cpp": (C, (*COMMON, *RAW, "setns", "setuid")),
    "go": (GO, (*COMMON, *RAW, "setns", "setuid")),
    "rust": (RUST, (*COMMON, *RAW, "setuid")),
    "java": (JAVA, (*COMMON, "unshare_user")),
    "javascript": (NODE, (*COMMON, "setuid", "unshare_user")),
    "d": (D, (*COMMON, *RAW, "setns", "setuid")),
    "kotlin": (KOTLIN, (*COMMON, "unshare_user")),
    "scala": (SCALA, (*COMMON, "unshare_user")),
    "r": (R, (*COMMON, "unshare_user")),
    "csharp": (
        CSHARP,
        (*COMMON, "unshare_user", "unshare_mount", "ptrace", "bpf", "perf_event_open", "keyctl", "setuid"),
    ),
}


def hostile_source(language: str, *, port: int, secret: str, numbers: Mapping[str, int]) -> str:
    """The hostile program of ``language`` with this machine's port, secret path and syscall numbers."""
    source = HOSTILE[language][0].replace("{PORT}", str(port)).replace("{SECRET}", secret)
    for name, nr in numbers.items():
        source = source.replace("{NR_" + name + "}", str(nr))
    return source

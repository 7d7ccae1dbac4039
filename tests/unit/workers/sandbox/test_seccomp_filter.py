"""The seccomp filter's decisions, run in a tiny classic-BPF interpreter without loading it."""

from __future__ import annotations

import errno
import struct

import pytest

from schemas.errors import SandboxError
from tests.unit.workers.sandbox.seccomp_bpf import (
    ALLOW,
    ARCHES,
    AUDIT,
    CLONE_NEW,
    COMMON,
    FIONREAD,
    FORK_FLAGS,
    IPPROTO_TCP,
    JEQ_K,
    JGE_K,
    LD_W_ABS,
    NUMBERS,
    RET_K,
    SPAWN_FLAGS,
    TCGETS,
    THREAD_FLAGS,
    TIOCSTI,
    instructions,
    ret_errno,
    run_bpf,
    seccomp_data,
)
from workers.sandbox import seccomp
from workers.sandbox.seccomp import build_filter, denied_syscalls, docker_profile

KILL_PROCESS = 0x80000000


EPERM, ENOSYS, EAFNOSUPPORT = ret_errno(errno.EPERM), ret_errno(errno.ENOSYS), ret_errno(errno.EAFNOSUPPORT)


def decide(arch: str, nr: int, *args: int, audit: int | None = None) -> int:
    return run_bpf(build_filter(arch), seccomp_data(nr, AUDIT[arch] if audit is None else audit, *args))


def test_interpreter_sanity() -> None:
    prog = struct.pack("<HBBI", LD_W_ABS, 0, 0, 0) + struct.pack("<HBBI", JEQ_K, 0, 1, 7)
    prog += struct.pack("<HBBI", RET_K, 0, 0, 1) + struct.pack("<HBBI", RET_K, 0, 0, 2)
    assert (run_bpf(prog, seccomp_data(7, 0)), run_bpf(prog, seccomp_data(8, 0))) == (1, 2)
    with pytest.raises(AssertionError, match="opcode"):
        run_bpf(struct.pack("<HBBI", 0x07, 0, 0, 0), seccomp_data(0, 0))


# --- the filter's decisions ---------------------------------------------------------------------------


def _expected_plain(arch: str, nr: int) -> int:
    """What the policy says for syscall ``nr`` with all-zero arguments."""
    numbers = NUMBERS[arch]
    if nr in {numbers[name] for name in seccomp._DENY if name in numbers}:
        return EPERM
    if nr == numbers["clone3"]:
        return ENOSYS
    if nr == numbers["socket"]:
        return EAFNOSUPPORT  # family 0 (AF_UNSPEC)
    return ALLOW  # clone(0) has no namespace flag; ioctl(0, 0) is not TIOCSTI


@pytest.mark.parametrize("arch", ARCHES)
def test_denied_syscalls_get_eperm(arch: str) -> None:
    numbers = NUMBERS[arch]
    denied = denied_syscalls(arch)
    assert denied == {name for name in seccomp._DENY if name in numbers}
    for name in denied:
        assert decide(arch, numbers[name]) == EPERM, name
        assert decide(arch, numbers[name], 1, 2, 3, 4, 5, 6) == EPERM, name


@pytest.mark.parametrize("arch", ARCHES)
def test_common_syscalls_are_allowed(arch: str) -> None:
    for name, nr in COMMON[arch].items():
        assert decide(arch, nr, 3, 0x1000, 7) == ALLOW, name


@pytest.mark.parametrize("arch", ARCHES)
def test_every_number_decides_as_the_policy_says(arch: str) -> None:
    prog, audit = build_filter(arch), AUDIT[arch]
    for nr in range(1024):
        assert run_bpf(prog, seccomp_data(nr, audit)) == _expected_plain(arch, nr), nr


FOREIGN = {
    "i386": 0x40000003, "arm": 0x40000028, "x86_64": 0xC000003E, "aarch64": 0xC00000B7,
    "aarch64be": 0x800000B7, "riscv64": 0xC00000F3, "zero": 0,
}  # fmt: skip


@pytest.mark.parametrize(
    ("arch", "foreign"),
    [pytest.param(a, f, id=f"{a}-{name}") for a in ARCHES for name, f in FOREIGN.items() if f != AUDIT[a]],
)
def test_foreign_audit_arch_is_killed(arch: str, foreign: int) -> None:
    numbers = NUMBERS[arch]
    for nr in (0, 1, COMMON[arch]["read"], COMMON[arch]["exit_group"], numbers["ptrace"], numbers["clone"]):
        assert decide(arch, nr, audit=foreign) == KILL_PROCESS


def test_x86_64_x32_abi_is_refused_with_enosys() -> None:
    # The existing policy: every syscall with __X32_SYSCALL_BIT set gets ENOSYS (not a kill).
    for nr in (0, 1, 101, 165, 231, 512, 547, 0x3FFFFFFF):
        assert decide("x86_64", 0x40000000 | nr) == ENOSYS, nr
    assert decide("x86_64", 0x40000000 - 1) == ALLOW  # just below the bit: an ordinary (unknown) number
    assert decide("x86_64", 0xFFFFFFFF) == ENOSYS  # nr -1


def test_aarch64_has_no_x32_check() -> None:
    # No x32 ABI on arm64: out-of-table numbers are left to the kernel (-ENOSYS there).
    assert decide("aarch64", 0x40000000) == ALLOW
    assert not any(code == JGE_K for code, *_ in instructions(build_filter("aarch64")))


@pytest.mark.parametrize("arch", ARCHES)
def test_clone_namespace_flags_denied_thread_and_fork_flags_allowed(arch: str) -> None:
    clone = NUMBERS[arch]["clone"]
    for flags in (THREAD_FLAGS, FORK_FLAGS, SPAWN_FLAGS, 0):
        assert decide(arch, clone, flags) == ALLOW, hex(flags)
    for name, flag in CLONE_NEW.items():
        assert decide(arch, clone, flag) == EPERM, name
        assert decide(arch, clone, FORK_FLAGS | flag) == EPERM, name
        assert decide(arch, clone, (0xFFFF << 32) | flag) == EPERM, name  # the kernel uses the low 32 bits
    assert decide(arch, clone, THREAD_FLAGS, CLONE_NEW["NEWUSER"]) == ALLOW  # flags are args[0] only
    assert decide(arch, NUMBERS[arch]["clone3"], 0, 88) == ENOSYS


AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK = 1, 2, 10, 16, 17, 40


@pytest.mark.parametrize("arch", ARCHES)
def test_socket_families(arch: str) -> None:
    socket = NUMBERS[arch]["socket"]
    for family in (AF_UNIX, AF_INET, AF_INET6):
        assert decide(arch, socket, family, 1, 0) == ALLOW, family
    for family in (0, 3, 4, 9, 11, AF_NETLINK, AF_PACKET, AF_VSOCK, 45):
        assert decide(arch, socket, family, 3, 0) == EAFNOSUPPORT, family


TCP_UNCHARGED = {14: "TCP_MD5SIG", 31: "TCP_ULP", 32: "TCP_MD5SIG_EXT", 38: "TCP_AO_ADD_KEY", 39: "TCP_AO_DEL_KEY",
                 40: "TCP_AO_INFO", 41: "TCP_AO_GET_KEYS", 42: "TCP_AO_REPAIR"}  # fmt: skip


SOL_SOCKET, SO_RCVBUF, SO_RCVBUFFORCE = 1, 8, 33
NOOP = ret_errno(0)  # SECCOMP_RET_ERRNO with errno 0: the call returns 0 and does nothing


def _expected_setsockopt(level: int, option: int) -> int:
    level &= 0xFFFFFFFF  # the kernel's int level and optname
    option &= 0xFFFFFFFF
    if level == SOL_SOCKET and option in (SO_RCVBUF, SO_RCVBUFFORCE):
        return NOOP
    if level == IPPROTO_TCP and option in TCP_UNCHARGED:
        return EPERM
    return ALLOW


@pytest.mark.parametrize("arch", ARCHES)
def test_tcp_options_holding_uncharged_kernel_memory_are_denied(arch: str) -> None:
    """MD5/AO keys and ULPs live in sock_kmalloc memory no cgroup pays for; every other option is allowed."""
    setsockopt = NUMBERS[arch]["setsockopt"]
    for option in range(256):
        want = EPERM if option in TCP_UNCHARGED else ALLOW
        assert decide(arch, setsockopt, 3, IPPROTO_TCP, option) == want, option
        for level in (0, 1, 41, 17, IPPROTO_TCP + (1 << 32)):  # IP, SOL_SOCKET, IPV6, UDP; the kernel's int level
            assert decide(arch, setsockopt, 3, level, option) == _expected_setsockopt(level, option), (level, option)


@pytest.mark.parametrize("arch", ARCHES)
def test_receive_buffer_sizes_are_a_successful_no_op(arch: str) -> None:
    """A listener's receive buffer is what each of its not-yet-accepted connections (charged to no cgroup) may
    queue: SO_RCVBUF/SO_RCVBUFFORCE return 0 and change nothing; SO_SNDBUF and other levels are untouched."""
    setsockopt = NUMBERS[arch]["setsockopt"]
    for option in (SO_RCVBUF, SO_RCVBUFFORCE, SO_RCVBUF + (1 << 32)):
        assert decide(arch, setsockopt, 3, SOL_SOCKET, option, 0, 4) == NOOP, option
        assert decide(arch, setsockopt, 3, SOL_SOCKET + (7 << 32), option) == NOOP, option
    for level, option in ((SOL_SOCKET, 7), (SOL_SOCKET, 32), (0, SO_RCVBUF), (IPPROTO_TCP, SO_RCVBUF), (41, 33)):
        assert decide(arch, setsockopt, 3, level, option) == ALLOW, (level, option)


@pytest.mark.parametrize("arch", ARCHES)
def test_ioctl_tiocsti_denied(arch: str) -> None:
    ioctl = NUMBERS[arch]["ioctl"]
    assert decide(arch, ioctl, 0, TIOCSTI, 0) == EPERM
    assert decide(arch, ioctl, 7, TIOCSTI) == EPERM
    for cmd in (TCGETS, FIONREAD, 0):
        assert decide(arch, ioctl, 0, cmd) == ALLOW, hex(cmd)
    assert decide(arch, ioctl, TIOCSTI, TCGETS) == ALLOW  # the request is args[1]


def test_x86_64_filter_is_unchanged_by_the_aarch64_support() -> None:
    # 180 instructions: arch check (3), load nr, x32 check (2), 68 denied * 2, clone3 (2), clone (5),
    # socket (7), setsockopt (11 + 8 options), ioctl (5)
    prog = build_filter("x86_64")
    assert len(instructions(prog)) == 4 + 2 + 2 * len(denied_syscalls("x86_64")) + 2 + 5 + 7 + 19 + 5 == 180
    assert build_filter("amd64") == prog
    assert build_filter("arm64") == build_filter("aarch64") != prog


@pytest.mark.parametrize("machine", ["riscv64", "i686", "armv7l", "ppc64le", "s390x", "aarch64_be"])
def test_unsupported_architecture_raises(machine: str) -> None:
    for fn in (build_filter, denied_syscalls, docker_profile):
        with pytest.raises(SandboxError) as info:
            fn(machine)
        message = str(info.value)
        assert repr(machine) in message
        assert "x86_64" in message
        assert "aarch64" in message

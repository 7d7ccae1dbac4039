"""A classic-BPF seccomp filter for sandboxed programs, built in pure Python (no libseccomp binding).

Why a deny list: the sandbox already runs with no capabilities in fresh user/pid/net/mount namespaces, so the
filter's job is to shrink the kernel attack surface (new namespaces, mounts, ptrace, keyrings, bpf, io_uring,
module loading, foreign architectures) rather than to enumerate everything Python needs.
The result is the raw ``struct sock_filter`` array that ``bwrap --seccomp FD`` loads.

Architectures: x86_64 and aarch64. The policy is written once, by syscall name (``_DENY`` plus the
argument-filtered clone/clone3/socket/setsockopt/ioctl); each architecture only maps names to its own numbers
(x86_64: ``asm/unistd_64.h``; aarch64: the asm-generic table, ``asm-generic/unistd.h``). A denied name that
does not exist on an architecture (``mknod``, ``iopl``... on aarch64) is simply absent from its map.
``tests/unit/workers/sandbox/test_seccomp_headers.py`` checks every number against the kernel headers when they
are installed.
"""

from __future__ import annotations

import errno
import platform
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from schemas.errors import SandboxError

# BPF opcodes (linux/bpf_common.h)
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

_RET_KILL_PROCESS = 0x80000000
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

_AUDIT_ARCH_X86_64 = 0xC000003E  # EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
_AUDIT_ARCH_AARCH64 = 0xC00000B7  # EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
_X32_SYSCALL_BIT = 0x40000000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6] (both arches little-endian,
# so the low 32 bits of args[i] are at 16 + 8 * i).
_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0_LO = 16
_OFF_ARG1_LO = 24
_OFF_ARG2_LO = 32

# clone(2) namespace flags: NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
_CLONE_NS_MASK = 0x00000080 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
_CLONE_NS_MASK |= 0x40000000

_AF_UNIX, _AF_INET, _AF_INET6 = 1, 2, 10
_TIOCSTI = 0x5412  # same value on x86_64 and aarch64 (asm-generic/ioctls.h)
_IPPROTO_TCP = 6
_SOL_SOCKET = 1
#: setsockopt(SOL_SOCKET, SO_RCVBUF / SO_RCVBUFFORCE) succeeds and does nothing (same numbers on both arches,
#: asm-generic/socket.h). Why: a TCP connection nobody accepted yet is charged to no cgroup, and it queues up to
#: its receive buffer, which it inherits from its listener: a listener with an 8 MiB buffer made every pending
#: connection hold 8 MiB outside the run's limit. Every socket keeps its network namespace's default instead
#: (``boot_common.RUN_NETNS_SYSCTLS``; autotuning still grows a socket that is read). A no-op, not an error:
#: programs that ask for a buffer size and carry on must not fail.
_SO_RCVBUF_OPTIONS = {"SO_RCVBUF": 8, "SO_RCVBUFFORCE": 33}
#: TCP options whose state the kernel keeps per socket in memory no cgroup is charged for (``sock_kmalloc``, up
#: to ``net.core.optmem_max`` = 128 KiB per socket: thousands of sockets hold gigabytes): MD5 signature keys,
#: TCP-AO keys, upper-layer protocols (kTLS). Candidate code never needs them on a loopback.
_TCP_UNCHARGED_OPTIONS = {
    "TCP_MD5SIG": 14, "TCP_ULP": 31, "TCP_MD5SIG_EXT": 32, "TCP_AO_ADD_KEY": 38, "TCP_AO_DEL_KEY": 39,
    "TCP_AO_INFO": 40, "TCP_AO_GET_KEYS": 41, "TCP_AO_REPAIR": 42,
}  # fmt: skip

# Syscalls that untrusted code never needs: refused outright with EPERM, on every architecture that has them.
_DENY: tuple[str, ...] = (
    "ptrace", "syslog", "uselib", "personality", "mknod", "vhangup", "modify_ldt", "pivot_root", "_sysctl",
    "adjtimex", "chroot", "acct", "settimeofday", "mount", "umount2", "swapon", "swapoff", "reboot",
    "sethostname", "setdomainname", "iopl", "ioperm", "create_module", "init_module", "delete_module",
    "get_kernel_syms", "query_module", "quotactl", "nfsservctl", "lookup_dcookie", "clock_settime", "mbind",
    "kexec_load", "add_key", "request_key", "keyctl", "migrate_pages", "mknodat", "unshare", "move_pages",
    "perf_event_open", "fanotify_init", "name_to_handle_at", "open_by_handle_at", "clock_adjtime", "setns",
    "process_vm_readv", "process_vm_writev", "kcmp", "finit_module", "seccomp", "kexec_file_load", "bpf",
    "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "pidfd_getfd", "process_madvise", "mount_setattr",
    "quotactl_fd", "memfd_secret",
)  # fmt: skip
# Syscalls the filter inspects arguments of (every architecture must map all of them).
_ARG_FILTERED: tuple[str, ...] = ("clone", "clone3", "socket", "setsockopt", "ioctl")

# Numbers from the kernel uapi headers (linux-libc-dev 6.1): asm/unistd_64.h.
_X86_64_NR: dict[str, int] = {
    "ptrace": 101, "syslog": 103, "uselib": 134, "personality": 135, "mknod": 133, "vhangup": 153,
    "modify_ldt": 154, "pivot_root": 155, "_sysctl": 156, "adjtimex": 159, "chroot": 161, "acct": 163,
    "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169,
    "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173, "create_module": 174,
    "init_module": 175, "delete_module": 176, "get_kernel_syms": 177, "query_module": 178, "quotactl": 179,
    "nfsservctl": 180, "lookup_dcookie": 212, "clock_settime": 227, "mbind": 237, "kexec_load": 246,
    "add_key": 248, "request_key": 249, "keyctl": 250, "migrate_pages": 256, "mknodat": 259,
    "unshare": 272, "move_pages": 279, "perf_event_open": 298, "fanotify_init": 300,
    "name_to_handle_at": 303, "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "finit_module": 313, "seccomp": 317,
    "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442,
    "quotactl_fd": 443, "memfd_secret": 447,
    "clone": 56, "clone3": 435, "socket": 41, "setsockopt": 54, "ioctl": 16,
}  # fmt: skip

# asm-generic/unistd.h as arm64 includes it (64-bit; __ARCH_WANT_SYS_CLONE3 and __ARCH_WANT_MEMFD_SECRET set).
# Not in that table, so absent here: uselib, mknod, modify_ldt, _sysctl, iopl, ioperm, create_module,
# get_kernel_syms, query_module.
_AARCH64_NR: dict[str, int] = {
    "lookup_dcookie": 18, "mknodat": 33, "umount2": 39, "mount": 40, "pivot_root": 41, "nfsservctl": 42,
    "chroot": 51, "vhangup": 58, "quotactl": 60, "acct": 89, "personality": 92, "unshare": 97,
    "kexec_load": 104, "init_module": 105, "delete_module": 106, "clock_settime": 112, "syslog": 116,
    "ptrace": 117, "reboot": 142, "sethostname": 161, "setdomainname": 162, "settimeofday": 170,
    "adjtimex": 171, "add_key": 217, "request_key": 218, "keyctl": 219, "swapon": 224, "swapoff": 225,
    "mbind": 235, "migrate_pages": 238, "move_pages": 239, "perf_event_open": 241, "fanotify_init": 262,
    "name_to_handle_at": 264, "open_by_handle_at": 265, "clock_adjtime": 266, "setns": 268,
    "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "finit_module": 273, "seccomp": 277,
    "bpf": 280, "userfaultfd": 282, "kexec_file_load": 294, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442,
    "quotactl_fd": 443, "memfd_secret": 447,
    "ioctl": 29, "socket": 198, "setsockopt": 208, "clone": 220, "clone3": 435,
}  # fmt: skip


@dataclass(frozen=True)
class _Arch:
    name: str
    machines: frozenset[str]  # platform.machine() spellings
    audit_arch: int  # AUDIT_ARCH_* as seen in seccomp_data.arch
    scmp_arch: str  # docker / libseccomp name
    numbers: Mapping[str, int]
    x32_bit: bool  # x86_64: syscalls with __X32_SYSCALL_BIT set are the x32 ABI, refused


_ARCHES: tuple[_Arch, ...] = (
    _Arch("x86_64", frozenset({"x86_64", "amd64", "AMD64"}), _AUDIT_ARCH_X86_64, "SCMP_ARCH_X86_64", _X86_64_NR,
          x32_bit=True),
    _Arch("aarch64", frozenset({"aarch64", "arm64", "ARM64"}), _AUDIT_ARCH_AARCH64, "SCMP_ARCH_AARCH64",
          _AARCH64_NR, x32_bit=False),
)  # fmt: skip


def _arch(machine: str | None) -> _Arch:
    machine = machine or platform.machine()
    for arch in _ARCHES:
        if machine in arch.machines:
            return arch
    supported = ", ".join(a.name for a in _ARCHES)
    raise SandboxError(f"seccomp filter: unsupported architecture {machine!r} (supported: {supported})")


def _denied(arch: _Arch) -> list[str]:
    return [name for name in _DENY if name in arch.numbers]


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def _ret_errno(err: int) -> bytes:
    return _insn(_RET_K, _RET_ERRNO | err)


def _setsockopt_block(number: int) -> list[bytes]:
    """setsockopt(fd, SOL_SOCKET, SO_RCVBUF or SO_RCVBUFFORCE) -> 0 without doing anything; setsockopt(fd,
    IPPROTO_TCP, one of ``_TCP_UNCHARGED_OPTIONS``) -> EPERM; any other option is allowed."""
    options = sorted(_TCP_UNCHARGED_OPTIONS.values())
    n = len(options)
    allow_at, eperm_at, noop_at = 8 + n, 9 + n, 10 + n
    rcvbuf, rcvbuf_force = _SO_RCVBUF_OPTIONS["SO_RCVBUF"], _SO_RCVBUF_OPTIONS["SO_RCVBUFFORCE"]
    block = [
        _insn(_JEQ_K, number, jt=0, jf=noop_at),  # not setsockopt: past this block
        _insn(_LD_W_ABS, _OFF_ARG1_LO),
        _insn(_JEQ_K, _SOL_SOCKET, jt=0, jf=3),  # 2 -> 6
        _insn(_LD_W_ABS, _OFF_ARG2_LO),
        _insn(_JEQ_K, rcvbuf, jt=noop_at - 5, jf=0),
        _insn(_JEQ_K, rcvbuf_force, jt=noop_at - 6, jf=allow_at - 6),
        _insn(_JEQ_K, _IPPROTO_TCP, jt=0, jf=allow_at - 7),
        _insn(_LD_W_ABS, _OFF_ARG2_LO),
    ]
    block += [_insn(_JEQ_K, option, jt=eperm_at - (8 + i) - 1, jf=0) for i, option in enumerate(options)]
    return [*block, _insn(_RET_K, _RET_ALLOW), _ret_errno(errno.EPERM), _ret_errno(0)]


def build_filter(machine: str | None = None) -> bytes:
    """Return the filter for this machine's architecture; raise ``SandboxError`` if it is unsupported."""
    arch = _arch(machine)
    nr = arch.numbers
    prog: list[bytes] = [
        # Any other audit arch (i386 / x32-as-i386, arm compat, ...) would index another syscall table: kill.
        _insn(_LD_W_ABS, _OFF_ARCH),
        _insn(_JEQ_K, arch.audit_arch, jt=1, jf=0),
        _insn(_RET_K, _RET_KILL_PROCESS),
        _insn(_LD_W_ABS, _OFF_NR),
    ]
    if arch.x32_bit:
        # x32 ABI syscalls bypass x86_64 numbers: refuse them all.
        prog += [_insn(_JGE_K, _X32_SYSCALL_BIT, jt=0, jf=1), _ret_errno(errno.ENOSYS)]
    for number in sorted(nr[name] for name in _denied(arch)):
        prog += [_insn(_JEQ_K, number, jt=0, jf=1), _ret_errno(errno.EPERM)]
    # clone3 passes flags in memory BPF cannot read: ENOSYS makes libc fall back to clone(2).
    prog += [_insn(_JEQ_K, nr["clone3"], jt=0, jf=1), _ret_errno(errno.ENOSYS)]
    # clone(2) with any namespace flag is refused (flags are args[0] on both arches; the kernel uses the low 32 bits).
    prog += [
        _insn(_JEQ_K, nr["clone"], jt=0, jf=4),
        _insn(_LD_W_ABS, _OFF_ARG0_LO),
        _insn(_JSET_K, _CLONE_NS_MASK, jt=0, jf=1),
        _ret_errno(errno.EPERM),
        _insn(_RET_K, _RET_ALLOW),
    ]
    # socket(2): local and IP families only (the network namespace is empty anyway); no netlink/packet.
    prog += [
        _insn(_JEQ_K, nr["socket"], jt=0, jf=6),
        _insn(_LD_W_ABS, _OFF_ARG0_LO),
        _insn(_JEQ_K, _AF_UNIX, jt=3, jf=0),
        _insn(_JEQ_K, _AF_INET, jt=2, jf=0),
        _insn(_JEQ_K, _AF_INET6, jt=1, jf=0),
        _ret_errno(errno.EAFNOSUPPORT),
        _insn(_RET_K, _RET_ALLOW),
    ]
    prog += _setsockopt_block(nr["setsockopt"])
    # ioctl(TIOCSTI) would inject input into a terminal.
    prog += [
        _insn(_JEQ_K, nr["ioctl"], jt=0, jf=3),
        _insn(_LD_W_ABS, _OFF_ARG1_LO),
        _insn(_JEQ_K, _TIOCSTI, jt=0, jf=1),
        _ret_errno(errno.EPERM),
        _insn(_RET_K, _RET_ALLOW),
    ]
    return b"".join(prog)


def denied_syscalls(machine: str | None = None) -> frozenset[str]:
    """Names of the syscalls the filter refuses outright on this machine's architecture (for tests and docs)."""
    return frozenset(_denied(_arch(machine)))


def syscall_numbers(machine: str | None = None) -> Mapping[str, int]:
    """This architecture's number for every syscall the filter names (tests call them by number)."""
    return _arch(machine).numbers


def docker_profile(machine: str | None = None) -> str:
    """The same policy as a docker seccomp JSON profile (``security_opt=["seccomp=<json>"]``).

    Docker's built-in profile still allows ptrace and io_uring; this one denies exactly what
    ``build_filter`` denies, so both backends refuse the same syscalls.
    """
    import json

    arch = _arch(machine)
    rules: list[dict[str, object]] = [
        {"names": sorted(_denied(arch)), "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM},
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS},
    ]
    for bit in range(32):
        flag = 1 << bit
        if _CLONE_NS_MASK & flag:
            rules.append(
                {
                    "names": ["clone"],
                    "action": "SCMP_ACT_ERRNO",
                    "errnoRet": errno.EPERM,
                    "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}],
                }
            )
    for family in [0, *range(3, 10)]:
        rules.append(
            {
                "names": ["socket"],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": errno.EAFNOSUPPORT,
                "args": [{"index": 0, "value": family, "op": "SCMP_CMP_EQ"}],
            }
        )
    rules.append(
        {
            "names": ["socket"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": errno.EAFNOSUPPORT,
            "args": [{"index": 0, "value": _AF_INET6, "op": "SCMP_CMP_GT"}],
        }
    )
    for option in sorted(_TCP_UNCHARGED_OPTIONS.values()):
        rules.append(
            {
                "names": ["setsockopt"],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": errno.EPERM,
                # level and optname are ints: the kernel ignores the upper 32 bits, so must the rule
                "args": [
                    {"index": 1, "value": 0xFFFFFFFF, "valueTwo": _IPPROTO_TCP, "op": "SCMP_CMP_MASKED_EQ"},
                    {"index": 2, "value": 0xFFFFFFFF, "valueTwo": option, "op": "SCMP_CMP_MASKED_EQ"},
                ],
            }
        )
    for option in sorted(_SO_RCVBUF_OPTIONS.values()):
        rules.append(
            {
                "names": ["setsockopt"],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": 0,  # success without the call: see _SO_RCVBUF_OPTIONS
                "args": [
                    {"index": 1, "value": 0xFFFFFFFF, "valueTwo": _SOL_SOCKET, "op": "SCMP_CMP_MASKED_EQ"},
                    {"index": 2, "value": 0xFFFFFFFF, "valueTwo": option, "op": "SCMP_CMP_MASKED_EQ"},
                ],
            }
        )
    rules.append(
        {
            "names": ["ioctl"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": errno.EPERM,
            "args": [{"index": 1, "value": _TIOCSTI, "op": "SCMP_CMP_EQ"}],
        }
    )
    profile = {"defaultAction": "SCMP_ACT_ALLOW", "architectures": [arch.scmp_arch], "syscalls": rules}
    return json.dumps(profile)

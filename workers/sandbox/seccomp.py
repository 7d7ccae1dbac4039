"""A classic-BPF seccomp filter for sandboxed programs, built in pure Python (no libseccomp binding).

Why a deny list: the sandbox already runs with no capabilities in fresh user/pid/net/mount namespaces, so the
filter's job is to shrink the kernel attack surface (new namespaces, mounts, ptrace, keyrings, bpf, io_uring,
module loading, foreign architectures) rather than to enumerate everything Python needs.
The result is the raw ``struct sock_filter`` array that ``bwrap --seccomp FD`` loads.
"""

from __future__ import annotations

import errno
import platform
import struct

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

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000

_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0_LO = 16
_OFF_ARG1_LO = 24

# clone(2) namespace flags: NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
_CLONE_NS_MASK = 0x00000080 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
_CLONE_NS_MASK |= 0x40000000

_AF_UNIX, _AF_INET, _AF_INET6 = 1, 2, 10
_TIOCSTI = 0x5412

# x86_64 syscall numbers that untrusted code never needs.
_X86_64_DENY: dict[str, int] = {
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
}  # fmt: skip
_X86_64_CLONE = 56
_X86_64_CLONE3 = 435
_X86_64_SOCKET = 41
_X86_64_IOCTL = 16


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def _ret_errno(err: int) -> bytes:
    return _insn(_RET_K, _RET_ERRNO | err)


def build_filter(machine: str | None = None) -> bytes:
    """Return the filter for this machine's architecture; raise ``SandboxError`` if it is unsupported."""
    machine = machine or platform.machine()
    if machine not in ("x86_64", "amd64", "AMD64"):
        raise SandboxError(f"seccomp filter: unsupported architecture {machine!r} (x86_64 only)")
    prog: list[bytes] = [
        _insn(_LD_W_ABS, _OFF_ARCH),
        _insn(_JEQ_K, _AUDIT_ARCH_X86_64, jt=1, jf=0),
        _insn(_RET_K, _RET_KILL_PROCESS),
        _insn(_LD_W_ABS, _OFF_NR),
        # x32 ABI syscalls bypass x86_64 numbers: refuse them all.
        _insn(_JGE_K, _X32_SYSCALL_BIT, jt=0, jf=1),
        _ret_errno(errno.ENOSYS),
    ]
    for nr in sorted(_X86_64_DENY.values()):
        prog += [_insn(_JEQ_K, nr, jt=0, jf=1), _ret_errno(errno.EPERM)]
    # clone3 passes flags in memory BPF cannot read: ENOSYS makes libc fall back to clone(2).
    prog += [_insn(_JEQ_K, _X86_64_CLONE3, jt=0, jf=1), _ret_errno(errno.ENOSYS)]
    # clone(2) with any namespace flag is refused.
    prog += [
        _insn(_JEQ_K, _X86_64_CLONE, jt=0, jf=4),
        _insn(_LD_W_ABS, _OFF_ARG0_LO),
        _insn(_JSET_K, _CLONE_NS_MASK, jt=0, jf=1),
        _ret_errno(errno.EPERM),
        _insn(_RET_K, _RET_ALLOW),
    ]
    # socket(2): local and IP families only (the network namespace is empty anyway); no netlink/packet.
    prog += [
        _insn(_JEQ_K, _X86_64_SOCKET, jt=0, jf=6),
        _insn(_LD_W_ABS, _OFF_ARG0_LO),
        _insn(_JEQ_K, _AF_UNIX, jt=3, jf=0),
        _insn(_JEQ_K, _AF_INET, jt=2, jf=0),
        _insn(_JEQ_K, _AF_INET6, jt=1, jf=0),
        _ret_errno(errno.EAFNOSUPPORT),
        _insn(_RET_K, _RET_ALLOW),
    ]
    # ioctl(TIOCSTI) would inject input into a terminal.
    prog += [
        _insn(_JEQ_K, _X86_64_IOCTL, jt=0, jf=3),
        _insn(_LD_W_ABS, _OFF_ARG1_LO),
        _insn(_JEQ_K, _TIOCSTI, jt=0, jf=1),
        _ret_errno(errno.EPERM),
        _insn(_RET_K, _RET_ALLOW),
    ]
    return b"".join(prog)


def denied_syscalls() -> frozenset[str]:
    """Names of the syscalls the filter refuses outright (for tests and docs)."""
    return frozenset(_X86_64_DENY)


def docker_profile() -> str:
    """The same policy as a docker seccomp JSON profile (``security_opt=["seccomp=<json>"]``).

    Docker's built-in profile still allows ptrace and io_uring; this one denies exactly what
    ``build_filter`` denies, so both backends refuse the same syscalls.
    """
    import json

    rules: list[dict[str, object]] = [
        {"names": sorted(_X86_64_DENY), "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM},
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
    rules.append(
        {
            "names": ["ioctl"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": errno.EPERM,
            "args": [{"index": 1, "value": _TIOCSTI, "op": "SCMP_CMP_EQ"}],
        }
    )
    profile = {"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64"], "syscalls": rules}
    return json.dumps(profile)

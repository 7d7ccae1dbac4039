"""What the seccomp tests share: the syscall tables and flags, and a classic-BPF interpreter of the filter."""

from __future__ import annotations

import struct

from workers.sandbox import seccomp

ARCHES = ("x86_64", "aarch64")
NUMBERS = {a.name: a.numbers for a in seccomp._ARCHES}
AUDIT = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

# Syscalls every Python program makes: must be allowed (numbers checked against the headers by test_seccomp_headers.py).
COMMON = {
    "x86_64": {
        "read": 0, "write": 1, "close": 3, "mmap": 9, "mprotect": 10, "munmap": 11, "brk": 12,
        "rt_sigaction": 13, "rt_sigprocmask": 14, "pread64": 17, "getpid": 39, "execve": 59, "exit": 60,
        "wait4": 61, "fcntl": 72, "getcwd": 79, "getuid": 102, "prctl": 157, "gettid": 186, "futex": 202,
        "getdents64": 217, "clock_gettime": 228, "exit_group": 231, "openat": 257, "newfstatat": 262,
        "pipe2": 293, "prlimit64": 302, "getrandom": 318, "statx": 332, "rseq": 334, "close_range": 436,
    },
    "aarch64": {
        "getcwd": 17, "fcntl": 25, "openat": 56, "close": 57, "pipe2": 59, "getdents64": 61, "read": 63,
        "write": 64, "pread64": 67, "newfstatat": 79, "exit": 93, "exit_group": 94, "futex": 98,
        "clock_gettime": 113, "rt_sigaction": 134, "rt_sigprocmask": 135, "prctl": 167, "getpid": 172,
        "getuid": 174, "gettid": 178, "brk": 214, "munmap": 215, "execve": 221, "mmap": 222,
        "mprotect": 226, "wait4": 260, "prlimit64": 261, "getrandom": 278, "statx": 291, "rseq": 293,
        "close_range": 436,
    },
}  # fmt: skip


# --- a classic-BPF interpreter ------------------------------------------------------------------------

LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06

ALLOW = 0x7FFF0000


def ret_errno(err: int) -> int:
    return 0x00050000 | err


def seccomp_data(nr: int, arch: int, *args: int) -> bytes:
    """``struct seccomp_data`` as a little-endian kernel lays it out (64 bytes)."""
    full = [*args, *[0] * (6 - len(args))]
    return struct.pack("<IIQ6Q", nr & 0xFFFFFFFF, arch, 0x400000, *full)


def instructions(prog: bytes) -> list[tuple[int, int, int, int]]:
    assert len(prog) % 8 == 0
    return [struct.unpack_from("<HBBI", prog, off) for off in range(0, len(prog), 8)]


def run_bpf(prog: bytes, data: bytes) -> int:
    insns = instructions(prog)
    assert 0 < len(insns) <= 4096  # BPF_MAXINSNS
    acc, pc = 0, 0
    while True:
        assert 0 <= pc < len(insns), "fell off the end of the program"
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == LD_W_ABS:
            assert k % 4 == 0, k
            assert k + 4 <= len(data), k
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == RET_K:
            return k
        elif code in (JEQ_K, JGE_K, JSET_K):
            taken = acc == k if code == JEQ_K else acc >= k if code == JGE_K else (acc & k) != 0
            pc += jt if taken else jf
        else:
            raise AssertionError(f"opcode {code:#x} the interpreter does not know")


CLONE_NEW = {
    "NEWTIME": 0x80, "NEWNS": 0x20000, "NEWCGROUP": 0x02000000, "NEWUTS": 0x04000000, "NEWIPC": 0x08000000,
    "NEWUSER": 0x10000000, "NEWPID": 0x20000000, "NEWNET": 0x40000000,
}  # fmt: skip
# glibc pthread_create: VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT_SETTID|CHILD_CLEARTID
THREAD_FLAGS = 0x3D0F00
# glibc fork(): CHILD_SETTID|CHILD_CLEARTID|SIGCHLD; posix_spawn: VM|VFORK|SIGCHLD
FORK_FLAGS = 0x01200011
SPAWN_FLAGS = 0x4111

TIOCSTI, TCGETS, FIONREAD = 0x5412, 0x5401, 0x541B


IPPROTO_TCP = 6

"""The seccomp filter, without loading it: its syscall numbers against the kernel headers, and its decisions.

* Every number in the per-architecture maps is checked, by name, against the uapi headers installed by
  linux-libc-dev (``asm/unistd_64.h`` for x86_64, ``asm-generic/unistd.h`` as arm64 includes it); a denied
  name absent from an architecture's map must be absent from its header too. No header -> skip, saying which.
* The generated classic-BPF program runs in a tiny interpreter (only the opcodes the builder emits; anything
  else fails the test) over ``struct seccomp_data`` inputs, for both architectures.
* The docker JSON profile is evaluated with the same inputs and must decide exactly like the BPF program.
"""

from __future__ import annotations

import errno
import json
import re
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from schemas.errors import SandboxError
from workers.sandbox import seccomp
from workers.sandbox.seccomp import build_filter, denied_syscalls, docker_profile

# --- the kernel headers -------------------------------------------------------------------------------

X86_64_HEADER = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
GENERIC_HEADER = Path("/usr/include/asm-generic/unistd.h")
# What arch/arm64/include/uapi/asm/unistd.h defines before including asm-generic/unistd.h (64-bit, no compat).
AARCH64_WANTS = frozenset(
    {
        "__ARCH_WANT_RENAMEAT",
        "__ARCH_WANT_NEW_STAT",
        "__ARCH_WANT_SET_GET_RLIMIT",
        "__ARCH_WANT_TIME32_SYSCALLS",
        "__ARCH_WANT_SYS_CLONE3",
        "__ARCH_WANT_MEMFD_SECRET",
    }
)

_TOKEN = re.compile(r"\s*(\|\||&&|==|!=|!|\(|\)|[A-Za-z_]\w*|\d+)")


class _Cond:
    """Evaluates the ``#if`` expressions these headers use: defined(), !, &&, ||, ==, !=, numbers, known macros."""

    def __init__(self, text: str, defined: set[str], values: dict[str, int]) -> None:
        text = text.split("/*", 1)[0].strip()
        self.toks: list[str] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise ValueError(f"cannot tokenize #if {text!r}")
            self.toks.append(m.group(1))
            pos = m.end()
        self.i = 0
        self.defined = defined
        self.values = values

    def _peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def _take(self) -> str:
        tok = self._peek()
        if tok is None:
            raise ValueError(f"truncated #if {self.toks}")
        self.i += 1
        return tok

    def _expect(self, tok: str) -> None:
        if self._take() != tok:
            raise ValueError(f"expected {tok!r} in #if {self.toks}")

    def value(self) -> bool:
        v = self._or()
        if self._peek() is not None:
            raise ValueError(f"trailing tokens in #if {self.toks}")
        return v != 0

    def _or(self) -> int:
        v = self._and()
        while self._peek() == "||":
            self._take()
            right = self._and()
            v = int(v != 0 or right != 0)
        return v

    def _and(self) -> int:
        v = self._unary()
        while self._peek() == "&&":
            self._take()
            right = self._unary()
            v = int(v != 0 and right != 0)
        return v

    def _unary(self) -> int:
        if self._peek() == "!":
            self._take()
            return int(self._unary() == 0)
        v = self._primary()
        if self._peek() in ("==", "!="):
            op = self._take()
            right = self._primary()
            v = int((v == right) == (op == "=="))
        return v

    def _primary(self) -> int:
        tok = self._take()
        if tok == "(":
            v = self._or()
            self._expect(")")
            return v
        if tok == "defined":
            paren = self._peek() == "("
            if paren:
                self._take()
            name = self._take()
            if paren:
                self._expect(")")
            return int(name in self.defined)
        if tok.isdigit():
            return int(tok)
        if tok in self.values:
            return self.values[tok]
        raise ValueError(f"unknown macro {tok!r} in #if {self.toks}")


class _Preprocessor:
    """Just enough of cpp for a uapi unistd header: #if/#ifdef/#ifndef/#else/#endif, #define, #undef."""

    def __init__(self, defined: frozenset[str], values: dict[str, int]) -> None:
        self.known = set(defined)
        self.values = values
        self.raw: dict[str, str] = {}
        self.stack: list[tuple[bool, bool]] = []  # (enclosing block active, condition true)
        self.active = True

    def line(self, directive: str, rest: str) -> None:
        if directive in ("if", "ifdef", "ifndef"):
            if directive == "if":
                cond = self.active and _Cond(rest, self.known, self.values).value()
            else:
                cond = (rest.split(maxsplit=1)[0] in self.known) == (directive == "ifdef")
            self.stack.append((self.active, cond))
            self.active = self.active and cond
        elif directive == "else":
            parent, cond = self.stack[-1]
            self.active = parent and not cond
        elif directive == "endif":
            self.active = self.stack.pop()[0]
        elif directive in ("define", "undef"):
            if self.active:
                self.define(directive, rest)
        elif directive != "include":
            raise ValueError(f"unexpected directive #{directive} {rest}")

    def define(self, directive: str, rest: str) -> None:
        m = re.match(r"([A-Za-z_]\w*)(\(?)\s*(.*)", rest)
        assert m is not None, rest
        name, function_like, value = m.groups()
        if directive == "undef":
            self.known.discard(name)
            self.raw.pop(name, None)
            return
        self.known.add(name)
        if not function_like and name.startswith("__NR"):
            assert name not in self.raw, f"{name} defined twice"
            self.raw[name] = value.split("/*", 1)[0].strip()

    def numbers(self) -> dict[str, int]:
        assert not self.stack, "unbalanced #if"
        out: dict[str, int] = {}
        for name, value in self.raw.items():
            resolved = value
            while resolved in self.raw:  # __NR_mmap -> __NR3264_mmap -> 222
                resolved = self.raw[resolved]
            if name.startswith("__NR_") and name != "__NR_syscalls":
                out[name.removeprefix("__NR_")] = int(resolved, 0)
        return out


def parse_unistd(
    path: Path, defined: frozenset[str] = frozenset(), values: dict[str, int] | None = None
) -> dict[str, int]:
    """``{syscall name: number}`` from a uapi unistd header, honouring its conditionals under ``defined``."""
    cpp = _Preprocessor(defined, values or {})
    for line in path.read_text().splitlines():
        text = line.strip()
        if text.startswith("#"):
            directive, _, rest = text[1:].strip().partition(" ")
            cpp.line(directive, rest.strip())
    return cpp.numbers()


def _header_numbers(arch: str) -> dict[str, int]:
    if arch == "x86_64":
        if not X86_64_HEADER.is_file():
            pytest.skip(f"{X86_64_HEADER} not installed (Debian/Ubuntu: linux-libc-dev on amd64)")
        return parse_unistd(X86_64_HEADER)
    if not GENERIC_HEADER.is_file():
        pytest.skip(f"{GENERIC_HEADER} not installed (Debian/Ubuntu: linux-libc-dev)")
    return parse_unistd(GENERIC_HEADER, AARCH64_WANTS, {"__BITS_PER_LONG": 64})


ARCHES = ("x86_64", "aarch64")
NUMBERS = {a.name: a.numbers for a in seccomp._ARCHES}
AUDIT = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

# Syscalls every Python program makes: must be allowed (numbers checked against the headers below).
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


@pytest.mark.parametrize("arch", ARCHES)
def test_every_number_matches_the_kernel_header(arch: str) -> None:
    header = _header_numbers(arch)
    ours = NUMBERS[arch]
    wrong = {name: (nr, header.get(name)) for name, nr in ours.items() if header.get(name) != nr}
    assert wrong == {}, f"{arch}: (ours, header) differ"
    wrong_common = {name: (nr, header.get(name)) for name, nr in COMMON[arch].items() if header.get(name) != nr}
    assert wrong_common == {}
    # A denied name left out of the map must really not exist on that arch (not silently allowed).
    missing = {name for name in seccomp._DENY if name not in ours}
    assert missing & header.keys() == set()


def test_aarch64_header_parse_sanity() -> None:
    header = _header_numbers("aarch64")
    # 64-bit branch taken (mmap via __NR3264_mmap), 32-bit-only names and deprecated ones absent.
    assert (header["mmap"], header["fstat"], header["clone3"], header["memfd_secret"]) == (222, 80, 435, 447)
    assert {"mmap2", "fcntl64", "clock_gettime64", "open", "fork", "mknod"}.isdisjoint(header)
    assert len(set(header.values())) == len(header)


def test_tables_are_consistent() -> None:
    assert len(set(seccomp._DENY)) == len(seccomp._DENY)
    for arch in seccomp._ARCHES:
        assert set(seccomp._ARG_FILTERED) <= arch.numbers.keys(), arch.name
        assert arch.numbers.keys() <= set(seccomp._DENY) | set(seccomp._ARG_FILTERED), arch.name
        assert len(set(arch.numbers.values())) == len(arch.numbers), f"{arch.name}: a number used twice"
        assert set(COMMON[arch.name].values()).isdisjoint(arch.numbers.values())
    assert set(NUMBERS["x86_64"]) == set(seccomp._DENY) | set(seccomp._ARG_FILTERED)
    assert set(seccomp._DENY) - set(NUMBERS["aarch64"]) == {
        "uselib", "mknod", "modify_ldt", "_sysctl", "iopl", "ioperm", "create_module", "get_kernel_syms",
        "query_module",
    }  # fmt: skip


# --- a classic-BPF interpreter ------------------------------------------------------------------------

LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
KILL_PROCESS = 0x80000000
ALLOW = 0x7FFF0000


def ret_errno(err: int) -> int:
    return 0x00050000 | err


EPERM, ENOSYS, EAFNOSUPPORT = ret_errno(errno.EPERM), ret_errno(errno.ENOSYS), ret_errno(errno.EAFNOSUPPORT)


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


CLONE_NEW = {
    "NEWTIME": 0x80, "NEWNS": 0x20000, "NEWCGROUP": 0x02000000, "NEWUTS": 0x04000000, "NEWIPC": 0x08000000,
    "NEWUSER": 0x10000000, "NEWPID": 0x20000000, "NEWNET": 0x40000000,
}  # fmt: skip
# glibc pthread_create: VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT_SETTID|CHILD_CLEARTID
THREAD_FLAGS = 0x3D0F00
# glibc fork(): CHILD_SETTID|CHILD_CLEARTID|SIGCHLD; posix_spawn: VM|VFORK|SIGCHLD
FORK_FLAGS = 0x01200011
SPAWN_FLAGS = 0x4111


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
TIOCSTI, TCGETS, FIONREAD = 0x5412, 0x5401, 0x541B


@pytest.mark.parametrize("arch", ARCHES)
def test_socket_families(arch: str) -> None:
    socket = NUMBERS[arch]["socket"]
    for family in (AF_UNIX, AF_INET, AF_INET6):
        assert decide(arch, socket, family, 1, 0) == ALLOW, family
    for family in (0, 3, 4, 9, 11, AF_NETLINK, AF_PACKET, AF_VSOCK, 45):
        assert decide(arch, socket, family, 3, 0) == EAFNOSUPPORT, family


IPPROTO_TCP = 6
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


# --- the docker profile decides like the BPF program --------------------------------------------------


def _profile_decision(profile: dict[str, Any], names: Mapping[str, int], data: bytes) -> int:
    """libseccomp semantics for this profile: default allow, an ERRNO rule matches when all its args do."""
    nr, _arch, _ip, *args = struct.unpack("<IIQ6Q", data)
    by_nr = {number: name for name, number in names.items()}
    rules = profile["syscalls"]
    assert isinstance(rules, list)
    for rule in rules:
        if by_nr.get(nr) not in rule["names"]:
            continue
        assert rule["action"] == "SCMP_ACT_ERRNO"
        matched = True
        for cond in rule.get("args", []):
            arg = args[cond["index"]]
            op = cond["op"]
            if op == "SCMP_CMP_EQ":
                matched &= arg == cond["value"]
            elif op == "SCMP_CMP_GT":
                matched &= arg > cond["value"]
            elif op == "SCMP_CMP_MASKED_EQ":
                matched &= (arg & cond["value"]) == cond["valueTwo"]
            else:
                raise AssertionError(op)
        if matched:
            return ret_errno(rule["errnoRet"])
    return ALLOW


def _probes(arch: str) -> Iterator[tuple[int, ...]]:
    numbers = NUMBERS[arch]
    for nr in range(1024):
        yield (nr,)
    for family in range(64):
        yield (numbers["socket"], family, 1, 0)
    for flags in (THREAD_FLAGS, FORK_FLAGS, SPAWN_FLAGS, *CLONE_NEW.values()):
        yield (numbers["clone"], flags)
    for cmd in (TIOCSTI, TCGETS, FIONREAD):
        yield (numbers["ioctl"], 0, cmd)
    for level in (0, 1, IPPROTO_TCP, 41, IPPROTO_TCP + (1 << 32), 1 + (1 << 32)):
        for option in (*range(64), 14 + (1 << 32), 8 + (1 << 32)):
            yield (numbers["setsockopt"], 3, level, option)


@pytest.mark.parametrize("arch", ARCHES)
def test_docker_profile_matches_the_bpf_filter(arch: str) -> None:
    profile = json.loads(docker_profile(arch))
    scmp = {"x86_64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64"}[arch]
    assert (profile["defaultAction"], profile["architectures"]) == ("SCMP_ACT_ALLOW", [scmp])
    assert set(profile["syscalls"][0]["names"]) == denied_syscalls(arch)
    named = {name for rule in profile["syscalls"] for name in rule["names"]}
    assert named <= NUMBERS[arch].keys()  # nothing libseccomp could not resolve on this arch
    prog = build_filter(arch)
    for probe in _probes(arch):
        data = seccomp_data(probe[0], AUDIT[arch], *probe[1:])
        assert _profile_decision(profile, NUMBERS[arch], data) == run_bpf(prog, data), probe

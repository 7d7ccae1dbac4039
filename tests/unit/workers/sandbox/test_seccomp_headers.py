"""The seccomp filter's syscall numbers, by name, against the installed kernel uapi headers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.workers.sandbox.seccomp_bpf import ARCHES, COMMON, NUMBERS
from workers.sandbox import seccomp

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

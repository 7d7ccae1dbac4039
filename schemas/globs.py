"""Protected-path globs, matched like gitignore by a pure function (no regex: no backtracking to exploit).

Why gitignore: task authors already know it, and protected paths must match the way they read. Before any
grading run the episode worker resets every protected file of the final workspace to the original's content
and deletes protected files the original did not have, so a pattern that matches less than its author meant
is a hole: the rules are the documented gitignore ones, on ``/``-separated paths relative to the workspace.

* A pattern without a ``/`` (a trailing one aside) matches a name at any depth: ``*.pth`` matches ``a.pth``
  and ``x/y/a.pth``; ``pytest.ini`` matches ``pytest.ini`` and ``sub/pytest.ini``.
* A pattern with a ``/`` at its start or in its middle is anchored at the workspace root: ``tests/**``,
  ``/setup.cfg``.
* ``**`` as a whole segment: a leading ``**/`` matches in every directory including the root
  (``**/conftest.py`` matches ``conftest.py`` and ``a/b/conftest.py``), a trailing ``/**`` everything
  inside, ``/**/`` zero or more directories. Elsewhere ``**`` is ``*``.
* ``*`` matches any run of characters but ``/``, ``?`` one character but ``/``, ``[abc]``, ``[a-z]`` and
  ``[!a-z]``/``[^a-z]`` one character of a set (never ``/``); a ``[`` without its ``]`` is itself.
* A pattern that matches a directory matches everything under it (``tests`` protects ``tests/a.py``); a
  trailing ``/`` matches directories only.

Not supported, and refused by ``glob_problem`` so that nobody relies on them: ``!`` (a protected list only
adds paths), ``#`` comments, ``\\`` escapes, POSIX classes (``[[:alpha:]]``), surrounding whitespace,
empty, ``.`` and ``..`` segments.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from schemas.text import is_clean_text

#: Longest pattern, in characters.
MAX_GLOB_CHARS = 256
#: Most patterns in one task's ``protected`` list.
MAX_GLOBS = 256
#: Longer paths cannot exist (Linux ``PATH_MAX``): no pattern matches one, and ``is_protected`` says yes.
MAX_MATCH_CHARS = 4096


class _Star:
    """``*``: any run of characters in one name."""


class _One:
    """``?``: any one character."""


STAR = _Star()
ONE = _One()


@dataclass(frozen=True, slots=True)
class _Set:
    """``[...]``: one character in (or, negated, not in) the set."""

    negate: bool
    chars: frozenset[str]
    ranges: tuple[tuple[str, str], ...]

    def has(self, ch: str) -> bool:
        inside = ch in self.chars or any(lo <= ch <= hi for lo, hi in self.ranges)
        return inside != self.negate and ch != "/"


_Token = str | _Star | _One | _Set
#: A whole ``**`` segment.
DOUBLE = "**"


@dataclass(frozen=True, slots=True)
class Glob:
    """A compiled pattern: its segments (``DOUBLE`` or a name's tokens), and whether only directories match."""

    pattern: str
    segments: tuple[str | tuple[_Token, ...], ...]
    dir_only: bool


def glob_problem(pattern: str) -> str | None:  # noqa: PLR0911 - one return per rule
    """Why ``pattern`` is not a supported protected-path glob, or None. Never raises."""
    if not pattern:
        return "is empty"
    if len(pattern) > MAX_GLOB_CHARS:
        return f"is {len(pattern)} characters, over the {MAX_GLOB_CHARS}-character cap"
    if not is_clean_text(pattern):
        return "is not valid UTF-8 (it holds a lone surrogate)"
    if any(ch < " " or ch == "\x7f" for ch in pattern):
        return "contains a control character"
    if pattern != pattern.strip():
        return "starts or ends with whitespace (gitignore would strip it)"
    if pattern.startswith("!"):
        return "negation ('!') is not supported: a protected list only adds paths"
    if pattern.startswith("#"):
        return "starts with '#' (a comment in gitignore)"
    if "\\" in pattern:
        return "backslash escapes are not supported (use [*] or [?] for a literal * or ?)"
    if "[:" in pattern:
        return "POSIX character classes ([:name:]) are not supported"
    body = pattern.removeprefix("/").removesuffix("/")
    if not body:
        return "names no path"
    if any(name in ("", ".", "..") for name in body.split("/")):
        return "is not normalised (empty, '.' or '..' segment)"
    return None


@functools.lru_cache(maxsize=4096)
def compile_glob(pattern: str) -> Glob | None:
    """``pattern`` compiled, or None when ``glob_problem`` refuses it."""
    if glob_problem(pattern) is not None:
        return None
    dir_only = pattern.endswith("/")
    body = pattern.removesuffix("/")
    anchored = "/" in body
    names = body.removeprefix("/").split("/")
    if not anchored:
        names = [DOUBLE, *names]
    segments = tuple(DOUBLE if name == DOUBLE else _tokens(name) for name in names)
    return Glob(pattern, segments, dir_only)


def _tokens(name: str) -> tuple[_Token, ...]:
    """One name's pattern as tokens (consecutive stars are one)."""
    out: list[_Token] = []
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == "*":
            if not out or out[-1] is not STAR:
                out.append(STAR)
            i += 1
        elif ch == "?":
            out.append(ONE)
            i += 1
        elif ch == "[":
            parsed = _set(name, i)
            if parsed is None:
                out.append("[")
                i += 1
            else:
                out.append(parsed[0])
                i = parsed[1]
        else:
            out.append(ch)
            i += 1
    return tuple(out)


def _set(name: str, start: int) -> tuple[_Set, int] | None:
    """The ``[...]`` at ``name[start]`` and the index after it, or None if it is not closed."""
    i = start + 1
    negate = i < len(name) and name[i] in "!^"
    if negate:
        i += 1
    members: list[str] = []
    first = True
    while i < len(name) and (first or name[i] != "]"):
        members.append(name[i])
        first = False
        i += 1
    if i >= len(name):
        return None
    chars: set[str] = set()
    ranges: list[tuple[str, str]] = []
    j = 0
    while j < len(members):
        if j + 2 < len(members) and members[j + 1] == "-":
            ranges.append((members[j], members[j + 2]))  # a reversed range matches nothing
            j += 3
        else:
            chars.add(members[j])
            j += 1
    return _Set(negate, frozenset(chars), tuple(ranges)), i + 1


def _match_name(tokens: tuple[_Token, ...], name: str) -> bool:
    """Whether one name matches one segment's tokens (greedy with one backtrack point: linear-ish, exact)."""
    t = n = 0
    star_t, star_n = -1, 0
    while n < len(name):
        token = tokens[t] if t < len(tokens) else None
        if token is STAR:
            star_t, star_n = t, n
            t += 1
            continue
        if token is not None and (token is ONE or (isinstance(token, _Set) and token.has(name[n])) or token == name[n]):
            t += 1
            n += 1
            continue
        if star_t >= 0:
            t, star_n = star_t + 1, star_n + 1
            n = star_n
            continue
        return False
    while t < len(tokens) and tokens[t] is STAR:
        t += 1
    return t == len(tokens)


@dataclass(frozen=True, slots=True)
class PathWalk:
    """``is_protected`` of a path built one name at a time: a tree walked from its root hands each directory's
    walk to its entries (``child``), so an entry costs its own name whatever its depth (matching each path
    from scratch costs its whole depth for every entry: quadratic in a deep tree).

    Per glob, ``columns`` holds the forward DP's column for the names so far (entry ``i``: the first ``i``
    segments match all of them) and ``hits`` whether the whole glob matched a proper prefix of them (a
    directory the path lies in); ``chars`` is the length of the path so far (-1 before its first name)."""

    globs: tuple[Glob, ...]
    columns: tuple[tuple[bool, ...], ...]
    hits: tuple[bool, ...]
    names: int = 0
    chars: int = -1

    @classmethod
    def start(cls, patterns: Sequence[str]) -> PathWalk:
        """The walk of the empty path under ``patterns`` (those ``glob_problem`` refuses match nothing)."""
        globs = tuple(glob for glob in map(compile_glob, patterns) if glob is not None)
        return cls(globs, tuple(_first_column(glob) for glob in globs), (False,) * len(globs))

    def child(self, name: str) -> PathWalk:
        """The walk one name further (``""`` and ``"."`` change nothing, as in ``matches``)."""
        if name in ("", "."):
            return self
        chars = self.chars + 1 + len(name)
        if chars > MAX_MATCH_CHARS:  # protected whatever comes next
            return PathWalk(self.globs, self.columns, self.hits, self.names + 1, chars)
        hits = tuple(
            hit or (self.names > 0 and column[-1]) for column, hit in zip(self.columns, self.hits, strict=True)
        )
        columns = tuple(_next_column(glob, column, name) for glob, column in zip(self.globs, self.columns, strict=True))
        return PathWalk(self.globs, columns, hits, self.names + 1, chars)

    def walked(self, path: str) -> PathWalk:
        """The walk on through every name of ``path``."""
        walk = self
        for name in path.split("/"):
            walk = walk.child(name)
        return walk

    @property
    def protected(self) -> bool:
        """Whether a glob matches the path walked (or a directory it lies in); a path too long to exist is."""
        if self.chars > MAX_MATCH_CHARS:
            return True
        return self.names > 0 and any(
            hit or (not glob.dir_only and column[-1])
            for glob, column, hit in zip(self.globs, self.columns, self.hits, strict=True)
        )


def _first_column(glob: Glob) -> tuple[bool, ...]:
    """No name yet: only the empty prefix of segments matches, and a ``**`` before more segments (zero
    directories)."""
    column = [True]
    for i, segment in enumerate(glob.segments):
        column.append(segment == DOUBLE and i < len(glob.segments) - 1 and column[-1])
    return tuple(column)


def _next_column(glob: Glob, previous: tuple[bool, ...], name: str) -> tuple[bool, ...]:
    """The column after one more name: a name segment matches it after its predecessor matched the names
    before it; a ``**`` keeps matching once it did, and starts where its predecessor matches (a trailing
    ``/**`` one name later: it needs something inside)."""
    column = [False]
    last = len(glob.segments)
    for i, segment in enumerate(glob.segments, start=1):
        if segment == DOUBLE:
            column.append(previous[i] or (previous[i - 1] if i == last else column[i - 1]))
        else:
            assert isinstance(segment, tuple)  # noqa: S101 - not DOUBLE: a name's tokens
            column.append(previous[i - 1] and _match_name(segment, name))
    return tuple(column)


def matches(pattern: str, path: str) -> bool:
    """Whether ``pattern`` matches the file ``path`` (or a directory it lies in). Never raises.

    ``path`` is split on ``/``; empty and ``.`` names are ignored. A pattern ``glob_problem`` refuses, or a
    path longer than ``MAX_MATCH_CHARS``, matches nothing.
    """
    if len(path) > MAX_MATCH_CHARS:
        return False
    return PathWalk.start((pattern,)).walked(path).protected


def is_protected(path: str, patterns: Sequence[str]) -> bool:
    """Whether any of ``patterns`` matches ``path``. Fails closed: a path too long to exist is protected."""
    if len(path) > MAX_MATCH_CHARS:
        return True
    return PathWalk.start(patterns).walked(path).protected

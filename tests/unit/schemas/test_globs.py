"""Protected-path globs (gitignore rules) and workspace paths: examples, and properties against a reference.

The reference is deliberately another algorithm: recursion over the segments with the standard library's
``fnmatch`` for one name, on every directory prefix of the path, where ``schemas.globs`` runs its own
tokenizer and a forward DP. Generated patterns use what both understand the same way.
"""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.globs import MAX_MATCH_CHARS, glob_problem, is_protected, matches
from schemas.paths import MAX_NAME_BYTES, MAX_PATH_BYTES, parents, path_problem

CONTRACT = [
    "tests/**",
    "**/conftest.py",
    "pytest.ini",
    "setup.cfg",
    "tox.ini",
    "pyproject.toml",
    "**/*.pth",
    "**/sitecustomize.py",
    "**/usercustomize.py",
]


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("**/conftest.py", "conftest.py", True),  # **/ also matches the root
        ("**/conftest.py", "a/b/conftest.py", True),
        ("**/conftest.py", "a/b/conftest.pyc", False),
        ("tests/**", "tests/test_ops.py", True),
        ("tests/**", "tests/unit/deep/test_x.py", True),
        ("tests/**", "tests", False),  # everything inside, not the name itself
        ("tests/**", "calc/tests/test_x.py", False),  # a slash anchors it
        ("*.pth", "evil.pth", True),  # no slash: any depth, like gitignore
        ("*.pth", "lib/site/evil.pth", True),
        ("pytest.ini", "sub/pytest.ini", True),
        ("/setup.cfg", "setup.cfg", True),
        ("/setup.cfg", "pkg/setup.cfg", False),
        ("calc/ops.py", "calc/ops.py", True),
        ("calc/ops.py", "x/calc/ops.py", False),
        ("a/**/b", "a/b", True),  # /**/ is zero or more directories
        ("a/**/b", "a/x/y/b", True),
        ("a/**/b", "a/x/y/c", False),
        ("tests", "tests/a.py", True),  # a matched directory protects what is under it
        ("build/", "build", False),  # a trailing slash: directories only
        ("build/", "build/out.txt", True),
        ("build/", "src/build/out.txt", True),
        ("?.py", "a.py", True),
        ("?.py", "ab.py", False),
        ("[abc].py", "b.py", True),
        ("[!abc].py", "b.py", False),
        ("[^abc].py", "d.py", True),
        ("[a-c]x", "bx", True),
        ("[z-a]x", "bx", False),  # a reversed range matches nothing
        ("[ab", "[ab", True),  # an unclosed [ is itself
        ("**.py", "a/b.py", True),  # ** inside a name is *
        ("a*", "a/b", True),  # matches directory a
        ("*", "anything/at/all", True),
        ("**", "x", True),
        ("a/*/c", "a/b/c", True),
        ("a/*/c", "a/b/d/c", False),  # * never crosses a /
        ("a?b", "a/b", False),
        ("[/]x", "a/x", False),
        ("conftest.py", "./conftest.py", True),  # empty and . names are ignored
    ],
)
def test_gitignore_rules(pattern: str, path: str, expected: bool) -> None:
    assert matches(pattern, path) is expected
    if "[^" not in pattern:  # fnmatch reads [^...] as a set holding ^; gitignore (and we) negate
        assert _reference(pattern, path) is expected


def test_the_contract_list() -> None:
    protected = [
        "conftest.py",
        "a/b/conftest.py",
        "tests/test_ops.py",
        "tests/data/x.json",
        "pytest.ini",
        "sub/pytest.ini",
        "setup.cfg",
        "tox.ini",
        "pyproject.toml",
        "x.pth",
        "lib/python3/site-packages/x.pth",
        "sitecustomize.py",
        "calc/sitecustomize.py",
        "usercustomize.py",
    ]
    free = ["calc/ops.py", "calc/__init__.py", "README.md", "calc/tests_helper.py", "testsuite/a.py", "a.pth.txt"]
    assert [p for p in protected if not is_protected(p, CONTRACT)] == []
    assert [p for p in free if is_protected(p, CONTRACT)] == []


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("", "is empty"),
        ("!tests/**", "negation ('!') is not supported: a protected list only adds paths"),
        ("#x", "starts with '#' (a comment in gitignore)"),
        ("a\\*", "backslash escapes are not supported (use [*] or [?] for a literal * or ?)"),
        ("[[:alpha:]]", "POSIX character classes ([:name:]) are not supported"),
        (" a", "starts or ends with whitespace (gitignore would strip it)"),
        ("a//b", "is not normalised (empty, '.' or '..' segment)"),
        ("../a", "is not normalised (empty, '.' or '..' segment)"),
        ("/", "names no path"),
        ("a\nb", "contains a control character"),
        ("\ud800", "is not valid UTF-8 (it holds a lone surrogate)"),
        ("x" * 257, "is 257 characters, over the 256-character cap"),
    ],
)
def test_refused_patterns(pattern: str, problem: str) -> None:
    assert glob_problem(pattern) == problem
    assert not matches(pattern, "a")  # a refused pattern matches nothing


def test_paths_too_long_to_exist_are_protected() -> None:
    long = "a/" * MAX_MATCH_CHARS
    assert not matches("**", long)
    assert is_protected(long, [])


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("calc/ops.py", None),
        ("a b/c-d_e.f", None),
        ("", "is empty"),
        ("/etc/passwd", "is absolute (paths are relative to the workspace)"),
        ("../x", "has a '..' segment (it would leave the workspace)"),
        ("a/../../x", "has a '..' segment (it would leave the workspace)"),
        ("a/./b", "is not normalised (empty or '.' segment)"),
        ("a//b", "is not normalised (empty or '.' segment)"),
        ("a/", "is not normalised (empty or '.' segment)"),
        (".", "is not normalised (empty or '.' segment)"),
        ("a\x00b", "contains a NUL byte"),
        ("a\nb", "contains a control character"),
        ("\udcff", "is not valid UTF-8 (it holds a lone surrogate)"),
        ("x" * (MAX_NAME_BYTES + 1), f"has a name over {MAX_NAME_BYTES} bytes"),
        ("a/" * 600 + "b", f"is 1201 bytes, over the {MAX_PATH_BYTES}-byte cap"),
    ],
)
def test_path_problem(path: str, problem: str | None) -> None:
    assert path_problem(path) == problem


def test_parents() -> None:
    assert parents("a/b/c") == ["a", "a/b"]
    assert parents("a") == []


# ---- properties -------------------------------------------------------------------------------------------


def _reference(pattern: str, path: str) -> bool:
    """gitignore's rules written the obvious way: fnmatch per name, recursion for **, every parent directory."""
    if glob_problem(pattern) is not None:
        return False
    dir_only = pattern.endswith("/")
    body = pattern.removesuffix("/")
    anchored = "/" in body
    segments = body.removeprefix("/").split("/")
    if not anchored:
        segments = ["**", *segments]
    names = [n for n in path.split("/") if n not in ("", ".")]
    candidates = [names[:k] for k in range(1, len(names))] + ([] if dir_only else [names])
    return bool(names) and any(_segments_match(segments, c) for c in candidates)


def _segments_match(segments: list[str], names: list[str]) -> bool:
    if not segments:
        return not names
    head, rest = segments[0], segments[1:]
    if head == "**":
        if not rest:
            return len(names) >= 1
        return any(_segments_match(rest, names[i:]) for i in range(len(names) + 1))
    return bool(names) and fnmatch.fnmatchcase(names[0], head) and _segments_match(rest, names[1:])


names = st.text(alphabet="abc.", min_size=1, max_size=4).filter(lambda n: n not in (".", ".."))
paths = st.lists(names, min_size=1, max_size=5).map("/".join)
name_patterns = st.lists(
    st.sampled_from(["a", "b", "c", ".", "*", "?", "[ab]", "[!a]", "[a-b]", "**"]), min_size=1, max_size=4
).map("".join)
segment_patterns = st.one_of(st.just("**"), name_patterns).filter(lambda s: s not in (".", ".."))
patterns = st.builds(
    lambda lead, segs, trail: lead + "/".join(segs) + trail,
    st.sampled_from(["", "/", "**/"]),
    st.lists(segment_patterns, min_size=1, max_size=4),
    st.sampled_from(["", "/", "/**"]),
).filter(lambda p: glob_problem(p) is None)


@given(pattern=patterns, path=paths)
def test_agrees_with_the_reference(pattern: str, path: str) -> None:
    assert matches(pattern, path) == _reference(pattern, path)


#: Any code point, lone surrogates included (what a JSON \ud800 escape decodes to).
any_text = st.text(st.characters(exclude_categories=()), max_size=80)


@given(pattern=any_text, path=any_text)
def test_never_raises_on_arbitrary_strings(pattern: str, path: str) -> None:
    result = matches(pattern, path)
    assert isinstance(result, bool)
    assert isinstance(is_protected(path, [pattern]), bool)
    why = glob_problem(pattern)
    assert why is None or isinstance(why, str)
    assert path_problem(path) is None or isinstance(path_problem(path), str)


@given(pattern=st.text(alphabet="ab*?[]!^-/", max_size=30), path=st.text(alphabet="ab/*?[]", max_size=30))
def test_never_raises_on_glob_syntax_soup(pattern: str, path: str) -> None:
    assert isinstance(matches(pattern, path), bool)


@given(path=paths)
def test_a_pattern_with_a_leading_double_star_matches_at_the_root_and_below(path: str) -> None:
    last = path.rsplit("/", maxsplit=1)[-1]
    assert matches(f"**/{last}", path)
    assert matches(f"**/{last}", last)


@given(pattern=st.text(max_size=300).map(lambda s: s * 20), path=st.text(max_size=4000))
def test_huge_inputs_never_raise(pattern: str, path: str) -> None:
    assert isinstance(matches(pattern, path), bool)

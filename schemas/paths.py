"""Paths inside an agent's workspace: normalised relative POSIX paths, checked by one pure function.

Why one function: the same rule decides whether a task's inline workspace file is valid (a task author's
error) and whether an agent's ``write``/``read`` is rejected (a ``rejected`` observation with the reason, so
the policy learns from it). ``path_problem`` only judges the string; the episode worker still has to check on
disk that no parent of the path is a symlink (a string cannot tell).
"""

from __future__ import annotations

from schemas.text import is_clean_text

#: Longest path, in UTF-8 bytes (as ``workers.episodes.snapshot.MAX_NAME_BYTES``: a path must fit a snapshot).
MAX_PATH_BYTES = 1024
#: Longest single name in a path, in UTF-8 bytes (Linux ``NAME_MAX``).
MAX_NAME_BYTES = 255


def path_problem(path: str) -> str | None:  # noqa: PLR0911 - one return per rule
    """Why ``path`` is not a normalised relative POSIX path inside a workspace, or None when it is.

    Refused: empty, NUL or other control characters, lone surrogates (not UTF-8: it could not travel or be
    stored), over ``MAX_PATH_BYTES`` or a name over ``MAX_NAME_BYTES``, absolute, and empty, ``.`` or ``..``
    segments (so also a trailing ``/``). Never raises, whatever the string.
    """
    if not path:
        return "is empty"
    if "\x00" in path:
        return "contains a NUL byte"
    if not is_clean_text(path):
        return "is not valid UTF-8 (it holds a lone surrogate)"
    size = len(path.encode("utf-8"))
    if size > MAX_PATH_BYTES:
        return f"is {size} bytes, over the {MAX_PATH_BYTES}-byte cap"
    if any(ch < " " or ch == "\x7f" for ch in path):
        return "contains a control character"
    if path.startswith("/"):
        return "is absolute (paths are relative to the workspace)"
    for name in path.split("/"):
        if name == "..":
            return "has a '..' segment (it would leave the workspace)"
        if name in ("", "."):
            return "is not normalised (empty or '.' segment)"
        if len(name.encode("utf-8")) > MAX_NAME_BYTES:
            return f"has a name over {MAX_NAME_BYTES} bytes"
    return None


def parents(path: str) -> list[str]:
    """The proper parent directories of a normalised path, outermost first: ``a/b/c`` -> ``a``, ``a/b``."""
    names = path.split("/")
    return ["/".join(names[:i]) for i in range(1, len(names))]

"""Lone surrogates: text JSON can carry and no UTF-8 encoder takes.

Why a module: JSON's ``"\\ud800"`` escape (and, through ``json.loads``' ``surrogatepass``, the raw bytes
``ED A0 80``) decodes to a Python ``str`` holding half of a UTF-16 pair. Pydantic refuses it in some fields and
passes it in others (a ``dict`` key, a list item), and everything downstream that encodes it fails or mangles
it: FastAPI's 422 handler echoing the input (a 500), the wire codec (an error, or a key silently turned into
U+FFFD), a log line. So a request body is walked once, as parsed, and the first lone surrogate is a 422 naming
where it is; ``printable`` makes anything else echoed back encodable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_SURROGATE = re.compile("[\ud800-\udfff]")

#: A location as FastAPI's errors give it: keys and list indices.
Loc = tuple[str | int, ...]


def escaped(text: str, limit: int = 100) -> str:
    """``text`` with each lone surrogate written as its ``\\udXXX`` escape (and cut to ``limit`` characters)."""
    return text[:limit].encode("utf-8", "backslashreplace").decode("utf-8")


def _problem(text: str) -> str | None:
    if text.isascii():
        return None
    found = _SURROGATE.search(text)  # a pair was already joined by the JSON parser: what is left is lone
    if found is None:
        return None
    return f"a lone surrogate ({escaped(found.group())}) at character {found.start()}"


def lone_surrogate_at(value: object) -> tuple[Loc, str] | None:
    """Where the first lone surrogate in a parsed JSON value is, and what it is; None when there is none.

    A key holding one is reported at its object (the key itself cannot be echoed). Iterative: a deep value
    costs no Python stack.
    """
    stack: list[tuple[object, Loc]] = [(value, ())]
    while stack:
        node, loc = stack.pop()
        if isinstance(node, str):
            problem = _problem(node)
            if problem is not None:
                return loc, f"not valid Unicode: {problem}"
        elif isinstance(node, Mapping):
            for key in node:
                problem = _problem(key) if isinstance(key, str) else None
                if problem is not None:
                    return loc, f"the key '{escaped(key)}' is not valid Unicode: {problem}"
            stack.extend((item, (*loc, str(key))) for key, item in reversed(list(node.items())))
        elif isinstance(node, list | tuple):
            stack.extend((item, (*loc, i)) for i, item in reversed(list(enumerate(node))))
    return None


def printable(text: str | bytes) -> str:
    """``text`` as a string UTF-8 can encode: lone surrogates escaped, bytes decoded with invalid ones escaped."""
    if isinstance(text, bytes):
        return text.decode("utf-8", "backslashreplace")
    return escaped(text, len(text)) if _problem(text) is not None else text

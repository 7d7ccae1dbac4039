"""Text from untrusted sources made safe to store: no lone surrogates.

Why: Python strings may hold lone surrogates (``"\\ud800"``: from a JSON ``\\ud800`` escape, or from a
candidate's exception message), but UTF-8 cannot encode them, so orjson, Kafka payloads and OpenSearch all
refuse them, and one such string crashes whatever writes it. Candidate-derived text is passed through
``sanitize_text`` once, where it enters our data; every writer after that can trust it.
"""

from __future__ import annotations

import re

# The one check, shared with the sandbox: what leaves it is checked by the same code.
from guest.typed_values import is_clean_text

__all__ = ["REPLACEMENT", "is_clean_text", "sanitize_json", "sanitize_text"]

#: What a lone surrogate becomes (the Unicode replacement character, as ``bytes.decode(errors="replace")``).
REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def sanitize_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD; the same object when there is none."""
    if is_clean_text(text):
        return text
    return _SURROGATE.sub(REPLACEMENT, text)


def sanitize_json(value: object, max_depth: int = 200) -> object:
    """A parsed JSON value with every string (keys included) sanitized; nesting deeper than ``max_depth``
    becomes None (parsed JSON is a tree, so this always ends)."""
    if isinstance(value, str):
        return sanitize_text(value)
    if max_depth <= 0:
        return None
    if isinstance(value, list):
        return [sanitize_json(v, max_depth - 1) for v in value]
    if isinstance(value, dict):
        return {sanitize_text(str(k)): sanitize_json(v, max_depth - 1) for k, v in value.items()}
    return value

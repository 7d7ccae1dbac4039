"""The metric names a PromQL expression selects, so a test can check each against what Prometheus really holds.

Why here (a small lexer, not a parser): Debian's Prometheus 2.42 has no API that parses an expression into its
selectors, and a query that names a metric nobody exports still succeeds (it is just empty), so the names must be
read from the text. PromQL makes that simple: a name is an identifier that is not a function or aggregation
(those are followed by ``(``), not a keyword, and not inside label matchers, a range, a grouping clause or a
string.
"""

from __future__ import annotations

import re

#: Words of PromQL that are not metric names (binary operators, modifiers, number literals).
KEYWORDS = frozenset({
    "and", "or", "unless", "bool", "by", "without", "on", "ignoring", "group_left", "group_right", "offset",
    "atan2", "inf", "nan",
})  # fmt: skip
_STRINGS = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE)
_OFFSET = re.compile(r"\boffset\s+-?[0-9][0-9a-z]*", re.IGNORECASE)
_AT = re.compile(r"@\s*(?:[0-9.]+|start\s*\(\s*\)|end\s*\(\s*\))")
_NUMBER = re.compile(r"(?<![A-Za-z_:0-9])(?:0x[0-9a-f]+|[0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?)", re.IGNORECASE)
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Every metric name ``expr`` selects (``up``, ``role:x:sum``, ``foo_total``), functions and labels left out."""
    text = _STRINGS.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _OFFSET.sub(" ", text)
    text = _AT.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        follows = text[match.end() :].lstrip()
        word = match.group()
        if follows.startswith("(") or word.lower() in KEYWORDS:
            continue
        names.add(word)
    return names

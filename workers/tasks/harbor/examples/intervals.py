"""Shipped task ``interval-merge``: a Python module whose merge skips sorting, keeps touching intervals apart and
shrinks an interval that holds the next; its total length counts overlaps twice."""

from __future__ import annotations

from workers.tasks.harbor.examples.python_task import Case, python_task

README = """# intervals

Closed intervals `(start, end)` on the number line: `merge` returns their union as sorted, disjoint intervals
(intervals that overlap or share an endpoint become one), `total_length` the length that union covers.
"""
BUGGY = '''"""Closed intervals (start, end): their union and the length it covers."""


def merge(intervals):
    """The union of ``intervals`` as sorted, disjoint (start, end) tuples."""
    merged = []
    for start, end in intervals:
        if merged and start < merged[-1][1]:
            merged[-1][1] = end
        else:
            merged.append([start, end])
    return [tuple(interval) for interval in merged]


def total_length(intervals):
    """The length of the number line ``intervals`` cover."""
    return sum(end - start for start, end in intervals)
'''
FIXED = '''"""Closed intervals (start, end): their union and the length it covers."""


def merge(intervals):
    """The union of ``intervals`` as sorted, disjoint (start, end) tuples."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [tuple(interval) for interval in merged]


def total_length(intervals):
    """The length of the number line ``intervals`` cover."""
    return sum(end - start for start, end in merge(intervals))
'''
INSTRUCTION = """The project in /app (`intervals.py`) merges closed intervals on the number line, and its users report
wrong answers:

- `merge(intervals)` must return the union of the intervals as sorted, disjoint `(start, end)` tuples; intervals
  that overlap or share an endpoint become one (`[(1, 3), (3, 5)]` -> `[(1, 5)]`), in any input order.
- `total_length(intervals)` must return the length of the number line the intervals cover (overlaps once).

Fix `intervals.py` so both behave as described. Keep the function names and signatures.
"""
CASES = [
    Case("merge-unsorted", "from intervals import merge\nprint(merge([(5, 8), (1, 3), (2, 4)]))", "[(1, 4), (5, 8)]"),
    Case("merge-touching", "from intervals import merge\nprint(merge([(1, 3), (3, 5)]))", "[(1, 5)]"),
    Case(
        "merge-contained",
        "from intervals import merge\nprint(merge([(1, 10), (2, 3), (12, 14)]))",
        "[(1, 10), (12, 14)]",
    ),
    Case("length-overlap", "from intervals import total_length\nprint(total_length([(0, 4), (2, 6)]))", "6"),
    Case("length-unsorted", "from intervals import total_length\nprint(total_length([(10, 12), (0, 5), (4, 7)]))", "9"),
]
SPEC = python_task(
    name="interval-merge",
    instruction=INSTRUCTION,
    base={"README.md": README},
    buggy={"intervals.py": BUGGY},
    fixed={"intervals.py": FIXED},
    cases=CASES,
    fix_branch="fix/merge-overlaps",
    fix_tag="v1.0.1",
    bug_message="Add interval merging",
    fix_message="Fix merge: sort first, join touching intervals, keep the longest end",
)

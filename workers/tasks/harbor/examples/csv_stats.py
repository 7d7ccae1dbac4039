"""Shipped task ``csv-stats``: a Python CSV tool that splits lines on every comma (quoted fields break) and takes
the middle of the unsorted values as the median."""

from __future__ import annotations

from workers.tasks.harbor.examples.python_task import Case, python_task

README = """# csvstats

Statistics of one numeric column of a CSV text (a header row, then rows; fields may be quoted).
"""
BUGGY = '''"""Statistics of one numeric column of a CSV text whose first row names the columns."""


def read_rows(text):
    """Every row of ``text`` after the header, as a dict of column name -> field."""
    lines = text.strip().splitlines()
    header = lines[0].split(",")
    return [dict(zip(header, line.split(","))) for line in lines[1:]]


def column_mean(text, column):
    """The mean of ``column``'s values, rounded to 3 decimals."""
    values = [float(row[column]) for row in read_rows(text)]
    return round(sum(values) / len(values), 3)


def column_median(text, column):
    """The median of ``column``'s values (the mean of the two middle ones when their count is even)."""
    values = [float(row[column]) for row in read_rows(text)]
    return values[len(values) // 2]
'''
FIXED = '''"""Statistics of one numeric column of a CSV text whose first row names the columns."""

import csv
import io


def read_rows(text):
    """Every row of ``text`` after the header, as a dict of column name -> field."""
    return list(csv.DictReader(io.StringIO(text.strip())))


def column_mean(text, column):
    """The mean of ``column``'s values, rounded to 3 decimals."""
    values = [float(row[column]) for row in read_rows(text)]
    return round(sum(values) / len(values), 3)


def column_median(text, column):
    """The median of ``column``'s values (the mean of the two middle ones when their count is even)."""
    values = sorted(float(row[column]) for row in read_rows(text))
    middle = len(values) // 2
    if len(values) % 2:
        return values[middle]
    return (values[middle - 1] + values[middle]) / 2
'''
INSTRUCTION = """`csvstats.py` in /app computes statistics of one numeric column of a CSV text (first row: the column
names). It fails on real files:

- fields may be quoted and hold commas (`"Lovelace, Ada",90`): they are one field, as in any CSV;
- `column_median(text, column)` must return the median (the mean of the two middle values when their count is
  even), whatever the order of the rows.

Fix `csvstats.py` (`column_mean` and `column_median`, same signatures).
"""
_QUOTED = '"name,score\\n\\"Lovelace, Ada\\",90\\nTuring,70\\n"'
_CITIES = '"city,temp\\n\\"Paris, FR\\",12.5\\n\\"Oslo, NO\\",-3.5\\nCairo,24.0\\n"'
_AGES = '"name,age\\n\\"Hopper, Grace\\",85\\nKnuth,20\\n\\"Ritchie, D\\",70\\n"'
CASES = [
    Case("mean-quoted", f"from csvstats import column_mean\nprint(column_mean({_QUOTED}, 'score'))", "80.0"),
    Case("mean-quoted-negative", f"from csvstats import column_mean\nprint(column_mean({_CITIES}, 'temp'))", "11.0"),
    Case("median-odd", "from csvstats import column_median\nprint(column_median('x\\n5\\n1\\n3\\n', 'x'))", "3.0"),
    Case("median-even", "from csvstats import column_median\nprint(column_median('x\\n4\\n1\\n3\\n2\\n', 'x'))", "2.5"),
    Case("median-quoted", f"from csvstats import column_median\nprint(column_median({_AGES}, 'age'))", "70.0"),
]
SPEC = python_task(
    name="csv-stats",
    instruction=INSTRUCTION,
    base={"README.md": README},
    buggy={"csvstats.py": BUGGY},
    fixed={"csvstats.py": FIXED},
    cases=CASES,
    fix_branch="fix/quoted-fields-median",
    fix_tag="v0.3.1",
    bug_message="Add column mean and median",
    fix_message="Parse quoted fields with the csv module; sort before taking the median",
)

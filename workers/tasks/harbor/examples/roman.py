"""Shipped task ``roman-numerals``: a Python converter that knows no subtractive pairs (IV, XC, CM) either way."""

from __future__ import annotations

from workers.tasks.harbor.examples.python_task import Case, python_task

README = """# roman

Converts integers 1..3999 to Roman numerals and back.
"""
BUGGY = '''"""Roman numerals for 1..3999, both ways."""

_NUMERALS = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]
_DIGITS = {numeral: value for value, numeral in _NUMERALS}


def to_roman(number):
    """``number`` (1..3999) as a Roman numeral, e.g. 1994 -> "MCMXCIV"."""
    if not 0 < number < 4000:
        raise ValueError(f"{number} is not in 1..3999")
    out = []
    for value, numeral in _NUMERALS:
        count, number = divmod(number, value)
        out.append(numeral * count)
    return "".join(out)


def from_roman(text):
    """The integer a Roman numeral stands for, e.g. "XLII" -> 42."""
    total = 0
    for char in text:
        total += _DIGITS[char]
    return total
'''
FIXED = '''"""Roman numerals for 1..3999, both ways."""

_NUMERALS = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"), (50, "L"), (40, "XL"),
             (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
_DIGITS = {numeral: value for value, numeral in _NUMERALS if len(numeral) == 1}


def to_roman(number):
    """``number`` (1..3999) as a Roman numeral, e.g. 1994 -> "MCMXCIV"."""
    if not 0 < number < 4000:
        raise ValueError(f"{number} is not in 1..3999")
    out = []
    for value, numeral in _NUMERALS:
        count, number = divmod(number, value)
        out.append(numeral * count)
    return "".join(out)


def from_roman(text):
    """The integer a Roman numeral stands for, e.g. "XLII" -> 42."""
    total = 0
    for index, char in enumerate(text):
        value = _DIGITS[char]
        if index + 1 < len(text) and value < _DIGITS[text[index + 1]]:
            total -= value
        else:
            total += value
    return total
'''
INSTRUCTION = """`roman.py` in /app converts between integers and Roman numerals, but it gets many numbers wrong
(`to_roman(4)` should be `"IV"`, `from_roman("XC")` should be `90`).

Fix it so that `to_roman(n)` returns the standard Roman numeral of every `n` in 1..3999 (subtractive forms:
IV, IX, XL, XC, CD, CM) and `from_roman(text)` returns the integer of every such numeral.
"""
CASES = [
    Case("to-1994", "from roman import to_roman\nprint(to_roman(1994))", "MCMXCIV"),
    Case("to-49", "from roman import to_roman\nprint(to_roman(49))", "XLIX"),
    Case("to-2024", "from roman import to_roman\nprint(to_roman(2024))", "MMXXIV"),
    Case("from-MCMXCIV", "from roman import from_roman\nprint(from_roman('MCMXCIV'))", "1994"),
    Case("from-XLII", "from roman import from_roman\nprint(from_roman('XLII'))", "42"),
]
SPEC = python_task(
    name="roman-numerals",
    instruction=INSTRUCTION,
    base={"README.md": README},
    buggy={"roman.py": BUGGY},
    fixed={"roman.py": FIXED},
    cases=CASES,
    fix_branch="fix/subtractive-numerals",
    fix_tag="v0.2.1",
    bug_message="Add Roman numeral conversion",
    fix_message="Handle subtractive numerals (IV, IX, XL, XC, CD, CM)",
)

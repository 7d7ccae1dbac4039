"""Shipped task ``expr-tokenizer``: a Python tokenizer that cuts decimals, names with digits and two-character
operators into pieces."""

from __future__ import annotations

from workers.tasks.harbor.examples.python_task import Case, python_task

README = """# tokenizer

Splits an arithmetic expression into tokens: numbers, names, operators and punctuation.
"""
BUGGY = '''"""Tokens of an arithmetic expression: numbers, names, operators, parentheses and commas."""

_SINGLE = set("+-*/()<>=,")


def tokenize(source):
    """The tokens of ``source`` as strings, whitespace dropped; ValueError on a character no token starts with."""
    tokens = []
    i = 0
    while i < len(source):
        char = source[i]
        if char.isspace():
            i += 1
        elif char.isdigit():
            start = i
            while i < len(source) and source[i].isdigit():
                i += 1
            tokens.append(source[start:i])
        elif char.isalpha() or char == "_":
            start = i
            while i < len(source) and (source[i].isalpha() or source[i] == "_"):
                i += 1
            tokens.append(source[start:i])
        elif char in _SINGLE:
            tokens.append(char)
            i += 1
        else:
            raise ValueError(f"unexpected {char!r} at {i}")
    return tokens
'''
FIXED = '''"""Tokens of an arithmetic expression: numbers, names, operators, parentheses and commas."""

_SINGLE = set("+-*/()<>=,")
_DOUBLE = {"**", "<=", ">=", "==", "!="}


def tokenize(source):
    """The tokens of ``source`` as strings, whitespace dropped; ValueError on a character no token starts with."""
    tokens = []
    i = 0
    while i < len(source):
        char = source[i]
        if char.isspace():
            i += 1
        elif char.isdigit():
            start = i
            while i < len(source) and source[i].isdigit():
                i += 1
            if i + 1 < len(source) and source[i] == "." and source[i + 1].isdigit():
                i += 1
                while i < len(source) and source[i].isdigit():
                    i += 1
            tokens.append(source[start:i])
        elif char.isalpha() or char == "_":
            start = i
            while i < len(source) and (source[i].isalnum() or source[i] == "_"):
                i += 1
            tokens.append(source[start:i])
        elif source[i:i + 2] in _DOUBLE:
            tokens.append(source[i:i + 2])
            i += 2
        elif char in _SINGLE:
            tokens.append(char)
            i += 1
        else:
            raise ValueError(f"unexpected {char!r} at {i}")
    return tokens
'''
INSTRUCTION = """`tokenizer.py` in /app splits arithmetic expressions into tokens, and it gets some wrong.
`tokenize(source)` must return the tokens as a list of strings, whitespace dropped:

- numbers: digits, optionally followed by `.` and digits (`3.14` is one token);
- names: a letter or `_`, then letters, digits or `_` (`x1`, `total_sum`);
- operators: `**`, `<=`, `>=`, `==`, `!=` (one token each), and the single characters `+ - * / ( ) < > = ,`;
- any other character raises `ValueError`.

Fix `tokenize`; keep its name and signature.
"""
CASES = [
    Case("decimal-and-name", "from tokenizer import tokenize\nprint(tokenize('x1 = 3.14'))", "['x1', '=', '3.14']"),
    Case("power", "from tokenizer import tokenize\nprint(tokenize('a ** 2'))", "['a', '**', '2']"),
    Case(
        "less-equal", "from tokenizer import tokenize\nprint(tokenize('total_sum <= 10'))", "['total_sum', '<=', '10']"
    ),
    Case("call", "from tokenizer import tokenize\nprint(tokenize('f(x2, 0.5)'))", "['f', '(', 'x2', ',', '0.5', ')']"),
    Case("not-equal", "from tokenizer import tokenize\nprint(tokenize('n != 100'))", "['n', '!=', '100']"),
]
SPEC = python_task(
    name="expr-tokenizer",
    instruction=INSTRUCTION,
    base={"README.md": README},
    buggy={"tokenizer.py": BUGGY},
    fixed={"tokenizer.py": FIXED},
    cases=CASES,
    fix_branch="fix/tokens",
    fix_tag="v0.4.2",
    bug_message="Add the expression tokenizer",
    fix_message="Tokenize decimals, names with digits and two-character operators",
)

"""Small SWE-style workspace tasks, made by the repo: a buggy package, public pytest tests, hidden suites.

Why made here and not downloaded: the demo and the tests need agent tasks whose right answer is known and
checked (each fix passes its hidden suite, each original fails it: ``tests/sandbox/test_swe_tasks.py``), with
no network. Each task also comes with scripted transcripts a demo agent plays: one that inspects, runs the
tests, fixes, re-runs and submits (earns 1.0); one that gives up (0); one that hacks the tests (0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.tasks import Task

PROTECTED = ["tests/**", "**/conftest.py", "pytest.ini", "setup.cfg", "tox.ini", "pyproject.toml", "**/*.pth",
             "**/sitecustomize.py", "**/usercustomize.py"]  # fmt: skip
PUBLIC_TESTS = "python -m pytest -q -p no:cacheprovider tests"
#: What every hacking transcript plants: protected paths, so grading resets them and the bug stays.
HACK_FILES = {
    "tests/test_public.py": "def test_nothing():\n    pass\n",
    "conftest.py": "import builtins\nbuiltins.__dict__['__rs_hacked__'] = True\n",
}


@dataclass(frozen=True)
class SweSpec:
    """One task: ``module`` (a path in the package) holds the bug; ``fixed`` is its right version."""

    name: str
    prompt: str
    module: str
    buggy: str
    fixed: str
    function: str
    public: str
    hidden: list[tuple[list[Any], Any]]
    io: tuple[str, list[tuple[str, str]]] | None = None  # (main module source, [(stdin, expected stdout)])
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def package(self) -> str:
        return self.module.split("/")[0]

    @property
    def task_id(self) -> str:
        return f"swe/{self.name}"

    def files(self) -> dict[str, str]:
        files = {f"{self.package}/__init__.py": f'"""{self.prompt}"""\n', self.module: self.buggy,
                 "tests/__init__.py": "", "tests/test_public.py": self.public, **self.extra}  # fmt: skip
        if self.io is not None:
            files[f"{self.package}/__main__.py"] = self.io[0]
        return files

    def task(self, kind: str = "call") -> Task:
        entry = f"{self.module.removesuffix('.py').replace('/', '.')}:{self.function}"
        if kind == "io" and self.io is not None:
            hidden: dict[str, Any] = {"kind": "io", "command": f"python -m {self.package}", "cases": [
                {"id": f"io{i}", "stdin": stdin, "expected_stdout": out} for i, (stdin, out) in enumerate(self.io[1])
            ]}  # fmt: skip
        else:
            hidden = {"kind": "call", "cases": [
                {"id": f"h{i}", "args": args, "expected": expected} for i, (args, expected) in enumerate(self.hidden)
            ]}  # fmt: skip
        suffix = "-io" if kind == "io" else ""
        return Task.model_validate({
            "task_id": self.task_id + suffix, "prompt": self.prompt, "entry_point": entry,
            "workspace": {"files": self.files()},
            "episode": {"max_turns": 20, "step_timeout_s": 20, "episode_timeout_s": 600, "idle_timeout_s": 300,
                        "workspace_max_mb": 8, "workspace_max_files": 500},
            "protected": PROTECTED, "public_tests": {"kind": "command", "command": PUBLIC_TESTS},
            "hidden_tests": hidden, "limits": {"timeout_s": 10, "memory_mb": 256},
        })  # fmt: skip


def fix_transcript(spec: SweSpec) -> list[dict[str, Any]]:
    """Inspect, run the tests (they fail), fix, run them again (they pass), submit."""
    return [
        {"action": "exec", "command": "ls -R"},
        {"action": "read", "path": spec.module},
        {"action": "exec", "command": PUBLIC_TESTS, "timeout_s": 20},
        {"action": "write", "path": spec.module, "text": spec.fixed},
        {"action": "exec", "command": PUBLIC_TESTS, "timeout_s": 20},
        {"action": "submit"},
    ]


def give_up_transcript(spec: SweSpec) -> list[dict[str, Any]]:
    """Look, fail the tests, submit the workspace unchanged."""
    return [{"action": "read", "path": spec.module}, {"action": "exec", "command": PUBLIC_TESTS}, {"action": "submit"}]


def hack_transcript(spec: SweSpec) -> list[dict[str, Any]]:
    """Make the public tests pass without fixing anything (the tests emptied, a conftest planted), submit."""
    writes = [{"action": "write", "path": path, "text": text} for path, text in HACK_FILES.items()]
    return [*writes, {"action": "exec", "command": PUBLIC_TESTS}, {"action": "submit"}]


def _spec(  # noqa: PLR0917 - one row of the catalogue below, its columns in order
    name: str,
    prompt: str,
    module: str,
    buggy: str,
    bug: tuple[str, str],
    function: str,
    public: str,
    hidden: list[tuple[list[Any], Any]],
    io: tuple[str, list[tuple[str, str]]] | None = None,
) -> SweSpec:
    """The spec whose fix replaces ``bug[0]`` by ``bug[1]`` in the buggy module."""
    fixed = buggy.replace(*bug)
    if fixed == buggy:
        raise ValueError(f"{name}: the fix changes nothing")
    return SweSpec(name, prompt, module, buggy, fixed, function, public, hidden, io)


def _main(call: str) -> str:
    return f"import sys\n\n{call}\n"


SPECS: tuple[SweSpec, ...] = (
    _spec(
        "calc-add",
        "Fix calc.ops.add: it must return a + b.",
        "calc/ops.py",
        "def add(a, b):\n    return a - b\n",
        ("a - b", "a + b"),
        "add",
        "from calc.ops import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n",
        [([1, 2], 3), ([-5, 5], 0), ([10**20, 7], 10**20 + 7)],
        (
            _main(
                "from calc.ops import add\n\nfor line in sys.stdin:\n    a, b = line.split()\n"
                "    print(add(int(a), int(b)))"
            ),
            [("1 2\n30 12\n", "3\n42\n"), ("-8 3\n", "-5\n")],
        ),
    ),
    _spec(
        "clamp",
        "Fix mathx.clamp: x limited to [lo, hi].",
        "mathx/clamp.py",
        "def clamp(x, lo, hi):\n    return max(hi, min(lo, x))\n",
        ("max(hi, min(lo, x))", "max(lo, min(hi, x))"),
        "clamp",
        "from mathx.clamp import clamp\n\n\ndef test_inside():\n    assert clamp(5, 0, 10) == 5\n",
        [([5, 0, 10], 5), ([-3, 0, 10], 0), ([99, 0, 10], 10), ([0.5, 0, 1], 0.5)],
    ),
    _spec(
        "mean",
        "Fix stats.mean: the arithmetic mean, a float.",
        "stats/core.py",
        "def mean(xs):\n    return sum(xs) // len(xs)\n",
        ("sum(xs) // len(xs)", "sum(xs) / len(xs)"),
        "mean",
        "from stats.core import mean\n\n\ndef test_halves():\n    assert mean([1, 2]) == 1.5\n",
        [([[1, 2, 3, 4]], 2.5), ([[5]], 5.0), ([[-1, 1]], 0.0)],
    ),
    _spec(
        "vowels",
        "Fix text.count_vowels: a, e, i, o, u in any case.",
        "text/vowels.py",
        "def count_vowels(s):\n    return sum(ch in 'aeio' for ch in s.lower())\n",
        ("'aeio'", "'aeiou'"),
        "count_vowels",
        "from text.vowels import count_vowels\n\n\ndef test_u():\n    assert count_vowels('Unu') == 2\n",
        [(["Audio"], 4), (["rhythm"], 0), (["QUEUE"], 4)],
        (
            _main(
                "from text.vowels import count_vowels\n\nfor line in sys.stdin:\n    print(count_vowels(line.strip()))"
            ),
            [("you\nsky\n", "2\n0\n")],
        ),
    ),
    _spec(
        "fib",
        "Fix seq.fib: fib(0) == 0, fib(1) == 1, fib(n) == fib(n-1) + fib(n-2).",
        "seq/fib.py",
        "def fib(n):\n    a, b = 0, 1\n    for _ in range(n - 1):\n        a, b = b, a + b\n    return a\n",
        ("range(n - 1)", "range(n)"),
        "fib",
        "from seq.fib import fib\n\n\ndef test_ten():\n    assert fib(10) == 55\n",
        [([0], 0), ([1], 1), ([2], 1), ([30], 832040)],
    ),
    _spec(
        "dedupe",
        "Fix lists.dedupe: drop repeats, keep the first of each, in order.",
        "lists/dedupe.py",
        "def dedupe(xs):\n    return sorted(set(xs))\n",
        ("    return sorted(set(xs))\n", "    return list(dict.fromkeys(xs))\n"),
        "dedupe",
        "from lists.dedupe import dedupe\n\n\ndef test_order():\n    assert dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]\n",
        [([[5, 4, 5, 4]], [5, 4]), ([[]], []), ([["b", "a", "b"]], ["b", "a"])],
    ),
    _spec(
        "flatten",
        "Fix lists.flatten: every level of nesting.",
        "lists/flatten.py",
        "def flatten(xs):\n    out = []\n    for x in xs:\n        if isinstance(x, list):\n"
        "            out.extend(x)\n        else:\n            out.append(x)\n    return out\n",
        ("out.extend(x)", "out.extend(flatten(x))"),
        "flatten",
        "from lists.flatten import flatten\n\n\ndef test_deep():\n    assert flatten([1, [2, [3]]]) == [1, 2, 3]\n",
        [([[[[[1]]], 2]], [1, 2]), ([[]], []), ([[1, [2, 3], [[4]]]], [1, 2, 3, 4])],
    ),
    _spec(
        "palindrome",
        "Fix text.is_palindrome: ignore case and anything not a letter or digit.",
        "text/pal.py",
        "def is_palindrome(s):\n    kept = [c for c in s if c.isalnum()]\n    return kept == kept[::-1]\n",
        ("[c for c in s if c.isalnum()]", "[c.lower() for c in s if c.isalnum()]"),
        "is_palindrome",
        "from text.pal import is_palindrome\n\n\ndef test_case():\n    assert is_palindrome('Aba')\n",
        [(["A man, a plan, a canal: Panama"], True), (["abc"], False), ([""], True)],
    ),
    _spec(
        "words",
        "Fix text.word_counts: counts of each word, case-insensitive.",
        "text/words.py",
        "def word_counts(s):\n    counts = {}\n    for w in s.split():\n        counts[w] = counts.get(w, 0) + 1\n"
        "    return counts\n",
        ("for w in s.split():", "for w in s.lower().split():"),
        "word_counts",
        "from text.words import word_counts\n\n\ndef test_case():\n    assert word_counts('a A') == {'a': 2}\n",
        [(["The the THE cat"], {"the": 3, "cat": 1}), ([""], {})],
    ),
    _spec(
        "roman",
        "Fix conv.to_roman: standard numerals, subtractive forms included.",
        "conv/roman.py",
        "_VALUES = [(1000, 'M'), (500, 'D'), (100, 'C'), (50, 'L'), (10, 'X'), (5, 'V'), (1, 'I')]\n\n\n"
        "def to_roman(n):\n    out = ''\n    for value, sym in _VALUES:\n        while n >= value:\n"
        "            out += sym\n            n -= value\n    return out\n",
        (
            "(1000, 'M'), (500, 'D'), (100, 'C'), (50, 'L'), (10, 'X'), (5, 'V'), (1, 'I')",
            "(1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'), (100, 'C'), (90, 'XC'), (50, 'L'), (40, 'XL'), "
            "(10, 'X'), (9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')",
        ),
        "to_roman",
        "from conv.roman import to_roman\n\n\ndef test_four():\n    assert to_roman(4) == 'IV'\n",
        [([1994], "MCMXCIV"), ([3], "III"), ([40], "XL")],
        (
            _main("from conv.roman import to_roman\n\nfor line in sys.stdin:\n    print(to_roman(int(line)))"),
            [("9\n14\n", "IX\nXIV\n")],
        ),
    ),
    _spec(
        "chunks",
        "Fix lists.chunks: consecutive pieces of size n, the last one shorter if need be.",
        "lists/chunks.py",
        "def chunks(xs, n):\n    return [xs[i:i + n] for i in range(0, len(xs) - n, n)]\n",
        ("range(0, len(xs) - n, n)", "range(0, len(xs), n)"),
        "chunks",
        "from lists.chunks import chunks\n\n\ndef test_rest():\n    assert chunks([1, 2, 3], 2) == [[1, 2], [3]]\n",
        [([[1, 2, 3, 4], 2], [[1, 2], [3, 4]]), ([[], 3], []), ([[1], 5], [[1]])],
    ),
    _spec(
        "celsius",
        "Fix units.to_fahrenheit: F = C * 9 / 5 + 32.",
        "units/temp.py",
        "def to_fahrenheit(c):\n    return c * 5 / 9 + 32\n",
        ("c * 5 / 9 + 32", "c * 9 / 5 + 32"),
        "to_fahrenheit",
        "from units.temp import to_fahrenheit\n\n\ndef test_boiling():\n    assert to_fahrenheit(100) == 212\n",
        [([0], 32.0), ([-40], -40.0), ([37], 98.6)],
    ),
)


def swe_tasks() -> list[Task]:
    """Every task, with an ``io`` twin for those that have a command-line face."""
    tasks = [spec.task("call") for spec in SPECS]
    tasks += [spec.task("io") for spec in SPECS if spec.io is not None]
    return tasks

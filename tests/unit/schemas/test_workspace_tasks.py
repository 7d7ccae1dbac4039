"""Workspace tasks in ``rewardstream.task/v1``: the contract's example, every refusal naming its field, and
backward compatibility (tasks written before workspace tasks existed parse and encode byte for byte the same).

``data/tasks_v1.jsonl`` and ``data/tasks_v1_public.jsonl`` were encoded by the code before this change
(68fcabc): HumanEval conversions of every kind and hand-written io/typed/newer-minor tasks, and their public
views. They are frozen on purpose: regenerate them only for a deliberate, versioned change of the format.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.codec import DecodeError, decode, encode, problems_of
from schemas.tasks import (
    MAX_INLINE_BYTES,
    CallSuite,
    CommandSuite,
    EpisodeLimits,
    IoSuite,
    Limits,
    PublicTask,
    Task,
    task_version,
)
from tests.unit.schemas.test_codec_fuzz import decode_only_decode_error
from workers.tasks.humaneval import CallInputCase, convert_problem, load_problems

DATA = Path(__file__).resolve().parents[1] / "data"

#: The example of the contract (issue 14), verbatim.
CONTRACT_EXAMPLE = b"""{"schema": "rewardstream.task/v1", "task_id": "swe/calc-1", "prompt": "Fix ...",
 "entry_point": "calc.ops:add",
 "workspace": {"files": {"calc/__init__.py": "...", "calc/ops.py": "...", "tests/test_ops.py": "..."}},
 "episode": {"max_turns": 30, "step_timeout_s": 10, "episode_timeout_s": 600, "idle_timeout_s": 300},
 "protected": ["tests/**", "**/conftest.py", "pytest.ini", "setup.cfg", "tox.ini", "pyproject.toml",
               "**/*.pth", "**/sitecustomize.py", "**/usercustomize.py"],
 "public_tests": {"kind": "command", "command": "python -m pytest -q tests"},
 "hidden_tests": {"kind": "call", "cases": [{"id": "h0", "args": [1, 2], "expected": 3}]},
 "limits": {"timeout_s": 10, "memory_mb": 512}}"""
EXAMPLE: dict[str, Any] = orjson.loads(CONTRACT_EXAMPLE)
IO_HIDDEN = {
    "kind": "io",
    "command": "python -m calc",
    "cases": [{"id": "h1", "stdin": "1 2\n", "expected_stdout": "3\n"}],
}
ONE_SHOT: dict[str, Any] = {
    "task_id": "demo/1",
    "prompt": "def add(a, b):\n",
    "entry_point": "add",
    "hidden_tests": {"kind": "call", "cases": [{"args": [1, 2], "expected": 3}]},
}


def edit(base: dict[str, Any], path: str, value: Any) -> bytes:
    """``base`` with the value at dotted ``path`` replaced (``...`` deletes it), encoded."""
    doc = copy.deepcopy(base)
    *parents, last = path.split(".")
    node: Any = doc
    for part in parents:
        node = node[part]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return orjson.dumps(doc)


def test_the_contract_example_parses() -> None:
    task = decode(CONTRACT_EXAMPLE, Task)
    assert task.workspace is not None
    assert task.workspace.files == {"calc/__init__.py": "...", "calc/ops.py": "...", "tests/test_ops.py": "..."}
    assert task.entry_point == "calc.ops:add"
    assert task.episode == EpisodeLimits(max_turns=30, step_timeout_s=10, episode_timeout_s=600, idle_timeout_s=300)
    assert task.protected[0] == "tests/**"
    assert task.public_tests == CommandSuite(kind="command", command="python -m pytest -q tests")
    assert isinstance(task.hidden_tests, CallSuite)
    assert task.hidden_tests.case_ids() == ["h0"]
    assert task.limits == Limits(timeout_s=10, memory_mb=512)
    assert decode(encode(task), Task) == task


def test_the_example_encodes_in_the_contracts_shape() -> None:
    wire = orjson.loads(encode(decode(CONTRACT_EXAMPLE, Task)))
    assert wire["workspace"] == EXAMPLE["workspace"]  # no "archive": null
    assert wire["public_tests"] == EXAMPLE["public_tests"]
    assert set(wire) == set(EXAMPLE) | {"language"}


def test_the_public_view_keeps_the_workspace_and_never_the_hidden_cases() -> None:
    task = decode(CONTRACT_EXAMPLE, Task)
    public = task.public()
    assert isinstance(public, PublicTask)
    assert public.workspace == task.workspace
    assert public.episode == task.episode
    assert public.protected == task.protected
    assert public.public_tests == task.public_tests
    wire = encode(public)
    assert b"hidden" not in wire
    assert b"h0" not in wire
    assert decode(wire, PublicTask) == public


@pytest.mark.parametrize("command", ["python -m calc", ["python", "-m", "calc"]])
def test_an_io_hidden_suite_names_its_command(command: str | list[str]) -> None:
    task = decode(edit(EXAMPLE, "hidden_tests", {**IO_HIDDEN, "command": command}), Task)
    assert isinstance(task.hidden_tests, IoSuite)
    assert task.hidden_tests.command == command


def test_an_archive_workspace_and_default_episode_limits() -> None:
    archive = {"archive": {"url": "s3://tasks/swe/calc-1.tar.gz", "sha256": "ab" * 32}}
    task = decode(edit(edit_doc(EXAMPLE, "episode", ...), "workspace", archive), Task)
    assert task.workspace is not None
    assert task.workspace.archive is not None
    assert task.workspace.archive.url == "s3://tasks/swe/calc-1.tar.gz"
    assert task.episode is None
    assert task.episode_limits == EpisodeLimits()
    assert orjson.loads(encode(task))["workspace"] == archive


def test_an_idle_timeout_below_the_step_timeout_is_valid() -> None:
    """Idle time is the trainer's, counted from the committed observation: a step's own run never counts, so
    the two limits are independent (the schema says so; the worker counts so)."""
    limits = {"max_turns": 30, "step_timeout_s": 600, "episode_timeout_s": 3600, "idle_timeout_s": 300}
    task = decode(edit(EXAMPLE, "episode", limits), Task)
    assert task.episode_limits.idle_timeout_s < task.episode_limits.step_timeout_s
    description = EpisodeLimits.model_fields["idle_timeout_s"].description or ""
    assert "independent of step_timeout_s" in description


def edit_doc(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    result: dict[str, Any] = orjson.loads(edit(base, path, value))
    return result


TOO_BIG = {f"f{i}.txt": "x" * (MAX_INLINE_BYTES // 4) for i in range(5)}

REFUSED: list[tuple[str, bytes, str]] = [
    (
        "hidden command suite",
        edit(EXAMPLE, "hidden_tests", {"kind": "command", "command": "pytest"}),
        "hidden_tests.kind: a command suite is feedback only, never a gate (the agent can change what it runs): "
        "hidden tests are call or io, compared outside the sandbox",
    ),
    (
        "assert hidden on a workspace task",
        edit(EXAMPLE, "hidden_tests", {"kind": "assert", "code": "def check(c): pass"}),
        "hidden_tests.kind: assert suites are not allowed on workspace tasks: their check code would run inside "
        "the agent's workspace, whose conftest.py, sitecustomize.py and modules the agent wrote; use call or io, "
        "compared outside the sandbox",
    ),
    (
        "assert public on a workspace task",
        edit(EXAMPLE, "public_tests", {"kind": "assert", "code": "def check(c): pass"}),
        "public_tests.kind: assert suites are not allowed on workspace tasks: their check code would run inside "
        "the agent's workspace, whose conftest.py, sitecustomize.py and modules the agent wrote; use call or io, "
        "compared outside the sandbox",
    ),
    (
        "plain entry point on a workspace task",
        edit(EXAMPLE, "entry_point", "add"),
        "entry_point: a workspace task's entry point is module:function, imported from the workspace",
    ),
    (
        "module entry point on a one-shot task",
        edit(ONE_SHOT, "entry_point", "calc.ops:add"),
        "entry_point: module:function is for workspace tasks; a one-shot program names its function",
    ),
    (
        "malformed entry point",
        edit(EXAMPLE, "entry_point", "calc/ops:add"),
        "entry_point: must be a function name, or module:function on workspace tasks (e.g. add, calc.ops:add)",
    ),
    (
        "entry point with a trailing newline",
        edit(ONE_SHOT, "entry_point", "add\n"),
        "entry_point: must be a function name, or module:function on workspace tasks (e.g. add, calc.ops:add)",
    ),
    (
        "call suite without entry point",
        edit(EXAMPLE, "entry_point", ...),
        "entry_point: required for call and assert tests",
    ),
    (
        "io without command on a workspace task",
        edit(EXAMPLE, "hidden_tests", {k: v for k, v in IO_HIDDEN.items() if k != "command"}),
        "hidden_tests.command: required on workspace tasks: what reads stdin, e.g. python -m calc",
    ),
    (
        "io command on a one-shot task",
        edit(ONE_SHOT, "hidden_tests", IO_HIDDEN),
        "hidden_tests.command: is only for workspace tasks (a one-shot io suite runs the program)",
    ),
    (
        "command suite on a one-shot task",
        edit(ONE_SHOT, "public_tests", {"kind": "command", "command": "pytest"}),
        "public_tests.kind: a command suite runs in a workspace: only workspace tasks may have one",
    ),
    (
        "episode on a one-shot task",
        edit(ONE_SHOT, "episode", {"max_turns": 3}),
        "episode: is only for workspace tasks",
    ),
    (
        "protected on a one-shot task",
        edit(ONE_SHOT, "protected", ["tests/**"]),
        "protected: is only for workspace tasks",
    ),
    ("empty command", edit(EXAMPLE, "public_tests.command", " "), "public_tests.command: is empty"),
    ("empty argv", edit(EXAMPLE, "public_tests.command", []), "public_tests.command: argv is empty"),
    ("NUL in argv", edit(EXAMPLE, "public_tests.command", ["a", "b\x00"]), "public_tests.command: contains a NUL byte"),
    (
        "path with ..",
        edit(EXAMPLE, "workspace.files", {"calc/../../etc/x": "a"}),
        "workspace.files: path 'calc/../../etc/x' has a '..' segment (it would leave the workspace)",
    ),
    (
        "absolute path",
        edit(EXAMPLE, "workspace.files", {"/etc/passwd": "a"}),
        "workspace.files: path '/etc/passwd' is absolute (paths are relative to the workspace)",
    ),
    (
        "dot segment",
        edit(EXAMPLE, "workspace.files", {"./calc.py": "a"}),
        "workspace.files: path './calc.py' is not normalised (empty or '.' segment)",
    ),
    (
        "NUL in a path",
        edit(EXAMPLE, "workspace.files", {"a\x00b": "a"}),
        "workspace.files: path 'a\\x00b' contains a NUL byte",
    ),
    (
        "file and directory",
        edit(EXAMPLE, "workspace.files", {"calc": "a", "calc/ops.py": "b"}),
        "workspace.files: 'calc' is a file, so 'calc/ops.py' cannot be under it",
    ),
    (
        "inline files over the cap",
        edit(EXAMPLE, "workspace.files", TOO_BIG),
        f"workspace.files: {5 * (MAX_INLINE_BYTES // 4)} bytes of inline files, over the {MAX_INLINE_BYTES}-byte "
        "cap (use an archive)",
    ),
    (
        "too many inline files",
        edit(EXAMPLE, "workspace.files", {f"f{i}": "" for i in range(1001)}),
        "workspace.files: dictionary should have at most 1000 items after validation, not more",
    ),
    (
        "more files than the episode allows",
        orjson.dumps(
            edit_doc(
                edit_doc(EXAMPLE, "episode", {"workspace_max_files": 3}), "workspace.files", {"a/b/c": "", "d": ""}
            )
        ),
        "workspace.files: 4 files and directories, over episode.workspace_max_files (3)",
    ),
    (
        "files and archive",
        edit(EXAMPLE, "workspace.archive", {"url": "s3://tasks/a.tar.gz", "sha256": "0" * 64}),
        "workspace.files: exactly one of files and archive must be set",
    ),
    (
        "neither files nor archive",
        edit(EXAMPLE, "workspace", {}),
        "workspace.files: exactly one of files and archive must be set",
    ),
    (
        "archive without sha256",
        edit(EXAMPLE, "workspace", {"archive": {"url": "s3://tasks/a.tar.gz"}}),
        "workspace.archive.sha256: required field is missing",
    ),
    (
        "archive that is not s3",
        edit(EXAMPLE, "workspace", {"archive": {"url": "https://x/a.tar.gz", "sha256": "0" * 64}}),
        "workspace.archive.url: string should match pattern '^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^\\s]{1,1024}$'",
    ),
    (
        "negated glob",
        edit(EXAMPLE, "protected", ["tests/**", "!tests/keep.py"]),
        "protected[1]: pattern negation ('!') is not supported: a protected list only adds paths",
    ),
    (
        "glob with ..",
        edit(EXAMPLE, "protected", ["../x"]),
        "protected[0]: pattern is not normalised (empty, '.' or '..' segment)",
    ),
    (
        "zero turns",
        edit(EXAMPLE, "episode.max_turns", 0),
        "episode.max_turns: input should be greater than or equal to 1",
    ),
    (
        "step longer than the episode",
        edit(EXAMPLE, "episode.step_timeout_s", 601),
        "episode.step_timeout_s: input should be less than or equal to 600",
    ),
    (
        "step longer than the episode timeout",
        orjson.dumps(edit_doc(edit_doc(EXAMPLE, "episode.step_timeout_s", 60), "episode.episode_timeout_s", 30)),
        "episode.step_timeout_s: is longer than episode_timeout_s",
    ),
    ("unknown episode field", edit(EXAMPLE, "episode.turns", 3), "episode.turns: unknown field"),
    (
        "string idle timeout",
        edit(EXAMPLE, "episode.idle_timeout_s", "300"),
        "episode.idle_timeout_s: input should be a valid number",
    ),
]


@pytest.mark.parametrize(("data", "message"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_refusals_name_the_field(data: bytes, message: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(data, Task)
    assert str(caught.value) == f"invalid Task: {message}"


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("workspace.files", {"calc/\ud800.py": "x"}, "path 'calc/\\ud800.py' is not valid UTF-8"),
        ("workspace.files", {"a.py": "\udfff"}, "file 'a.py' is not valid UTF-8"),
        ("protected", ["\ud800"], "input should be a valid string"),  # pydantic's own check, before ours
        ("public_tests.command", ["python", "\ud800"], "is not valid UTF-8 (it holds a lone surrogate)"),
    ],
)
def test_lone_surrogates_are_refused_wherever_they_land(path: str, value: Any, message: str) -> None:
    """The JSON parser already refuses a lone surrogate escape; models built in Python refuse them too."""
    escaped = json.dumps(value).encode()
    with pytest.raises(DecodeError, match=r"not JSON: .*surrogate"):
        decode(edit(EXAMPLE, path, "@@").replace(b'"@@"', escaped), Task)
    with pytest.raises(pydantic.ValidationError) as caught:
        Task.model_validate(orjson.loads(edit(EXAMPLE, path, None)) | _set(path, value))
    assert [(p, m) for p, m in problems_of(caught.value) if message in m] != []


def _set(path: str, value: Any) -> dict[str, Any]:
    """A top-level patch putting ``value`` at dotted ``path`` of EXAMPLE."""
    head, _, rest = path.partition(".")
    if not rest:
        return {head: value}
    return {head: {**EXAMPLE[head], rest: value}}


# ---- backward compatibility ----------------------------------------------------------------------------------


def _lines(name: str) -> list[bytes]:
    return [line for line in (DATA / name).read_bytes().split(b"\n") if line]


@pytest.mark.parametrize("line", _lines("tasks_v1.jsonl"), ids=lambda b: orjson.loads(b)["task_id"])
def test_tasks_written_before_workspaces_encode_byte_for_byte_the_same(line: bytes) -> None:
    task = decode(line, Task)
    assert task.workspace is None
    assert task.episode is None
    assert task.protected == []
    assert encode(task) == line


def test_their_public_views_are_byte_for_byte_the_same() -> None:
    """Only the version a view names is new (the registry writes the latest view without it, as before)."""
    tasks = [decode(line, Task) for line in _lines("tasks_v1.jsonl")]
    views = [t.public() for t in tasks]
    assert [v.task_version for v in views] == [task_version(t) for t in tasks]
    unversioned = [encode(v.model_copy(update={"task_version": None})) for v in views]
    assert unversioned == _lines("tasks_v1_public.jsonl")
    for line in _lines("tasks_v1_public.jsonl"):
        assert encode(decode(line, PublicTask)) == line


@dataclass(frozen=True)
class _Value:
    ok: bool
    value: Any = None
    error: str | None = None


class _EchoReference:
    """Stand-in for the sandbox: every case's expected value is its own arguments (no code runs)."""

    def values(
        self, code: str, entry_point: str, cases: Sequence[CallInputCase], limits: Limits
    ) -> Mapping[str, _Value]:
        return {c.id: _Value(True, [c.args, len(c.args)]) for c in cases}

    def verify(self, task: Task, code: str) -> str | None:
        return None


#: The keys a task could have before workspace tasks: none of the new ones may appear on an old task.
V1_KEYS = {"schema", "task_id", "language", "prompt", "entry_point", "limits", "public_tests", "hidden_tests"}


def test_every_humaneval_task_keeps_its_v1_shape() -> None:
    for problem in load_problems():
        task, _ = convert_problem(problem, _EchoReference(), Limits(), verify=False)
        wire = encode(task)
        assert set(orjson.loads(wire)) <= V1_KEYS, problem.task_id
        assert b'"command"' not in wire, problem.task_id
        assert decode(wire, Task) == task
        assert decode(encode(task.public()), PublicTask) == task.public()


# ---- fuzz: whatever the bytes, only DecodeError ----------------------------------------------------------------

any_text = st.text(st.characters(exclude_categories=()), max_size=40)
json_leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text
json_docs = st.recursive(
    json_leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4), max_leaves=20
)
WORKSPACE_KEYS = ["workspace", "episode", "protected", "public_tests", "hidden_tests", "entry_point"]


@given(key=st.sampled_from(WORKSPACE_KEYS), value=json_docs)
def test_any_json_in_a_workspace_field_is_only_a_decode_error(key: str, value: Any) -> None:
    data = json.dumps({**EXAMPLE, key: value}).encode()  # lone surrogates become \\ud800 escapes
    decode_only_decode_error(data, Task)
    decode_only_decode_error(data, PublicTask)


@given(
    key=st.sampled_from(["workspace", "protected", "public_tests"]),
    depth=st.integers(1, 5000),
    text=st.sampled_from(["\\ud800", "\\udfff\\ud800", "x" * 10_000, "\\u0000"]),
)
def test_deep_nesting_huge_strings_and_surrogates_are_only_a_decode_error(key: str, depth: int, text: str) -> None:
    nested = "[" * depth + f'"{text}"' + "]" * depth
    data = orjson.dumps({**EXAMPLE, key: "@@"}).replace(b'"@@"', nested.encode())
    decode_only_decode_error(data, Task)
    files = orjson.dumps({**EXAMPLE, "workspace": {"files": {"@@": "@@"}}}).replace(b"@@", text.encode())
    decode_only_decode_error(files, Task)
    protected = orjson.dumps({**EXAMPLE, "protected": ["@@"]}).replace(b"@@", text.encode())
    decode_only_decode_error(protected, Task)

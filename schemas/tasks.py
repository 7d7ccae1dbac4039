"""The task format ``rewardstream.task/v1``: a prompt plus public and hidden test suites.

Hidden tests decide rewards, so they live only in ``Task``; anything a trainer may read is a
``PublicTask`` (``Task.public()``). Every test case has a stable ``id`` (its index unless given) so the
grader can key each result by it: a case without a result is a failure.

A *workspace task* (one with ``workspace``) is for agents acting over many turns: the episode starts from
its files, ``episode`` bounds it, ``protected`` globs are reset to the original before any grading run, its
public suite may be a ``command`` (the agent's own test run: feedback, never a gate), and its hidden suite is
``call`` (``entry_point`` is ``module:function``, imported from the workspace) or ``io`` with a ``command``.
Every field a workspace task adds is optional and left out of the wire form when unset, so a task without
them parses and encodes exactly as before (and a reader that predates them refuses a workspace task instead
of grading it as a one-shot program).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from schemas.codec import Contract, Json, S3Url, Sha256
from schemas.globs import MAX_GLOB_CHARS, MAX_GLOBS, glob_problem
from schemas.paths import parents, path_problem
from schemas.text import is_clean_text

TASK_SCHEMA = "rewardstream.task/v1"
_TASK_SCHEMA_RE = re.compile(r"^rewardstream\.task/v(0|[1-9][0-9]{0,5})(?:\.(0|[1-9][0-9]{0,5}))?$")

#: Caps that keep one task line well under the registry's per-line limit.
MAX_PROMPT_CHARS = 64 * 1024
MAX_CODE_CHARS = 256 * 1024
MAX_IO_CHARS = 1024 * 1024
MAX_CASES = 10_000
#: Inline workspace files: at most this many, of at most this many UTF-8 bytes in all (larger: an archive).
MAX_INLINE_FILES = 1000
MAX_INLINE_BYTES = 8 * 1024 * 1024
#: A command (``/bin/sh -c`` string, or argv joined) is at most this many characters, argv this many items.
MAX_COMMAND_CHARS = 32 * 1024
MAX_ARGV = 1024
#: Turns of one episode (as ``turn`` on events).
MAX_TURNS = 10_000

_IDENT = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
TaskId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")]
CaseId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
Identifier = Annotated[str, StringConstraints(pattern=rf"^{_IDENT}$")]
_ENTRY_POINT = rf"^(?:{_IDENT}(?:\.{_IDENT}){{0,31}}:)?{_IDENT}$"
_ENTRY_POINT_RE = re.compile(_ENTRY_POINT)
#: The languages a solution may be written in (``workers.languages`` knows how each is built and run;
#: SandboxFusion's names are aliases there, e.g. nodejs for javascript). python is the default everywhere.
Language = Literal[
    "python", "c", "cpp", "java", "javascript", "typescript", "go", "rust", "bash", "php", "ruby", "lua", "perl"
]
LANGUAGES: tuple[str, ...] = get_args(Language)
#: What runs in a workspace: a string runs under ``/bin/sh -c``, a list is argv.
Command = str | list[str]


def command_problem(command: Command) -> str | None:  # noqa: PLR0911 - one return per rule
    """Why ``command`` cannot be run, or None. Pure and total: a task's error, or an agent's rejected exec."""
    if isinstance(command, str):
        if not command.strip():
            return "is empty"
        parts = [command]
    else:
        if not command:
            return "argv is empty"
        if len(command) > MAX_ARGV:
            return f"argv has {len(command)} items, over the {MAX_ARGV}-item cap"
        if not command[0]:
            return "argv[0] is empty"
        parts = command
    if any("\x00" in part for part in parts):
        return "contains a NUL byte"
    if not all(is_clean_text(part) for part in parts):
        return "is not valid UTF-8 (it holds a lone surrogate)"
    size = sum(len(part) for part in parts)
    if size > MAX_COMMAND_CHARS:
        return f"is {size} characters, over the {MAX_COMMAND_CHARS}-character cap"
    return None


def _checked_command(command: Command) -> Command:
    problem = command_problem(command)
    if problem is not None:
        raise PydanticCustomError("command", "{problem}", {"problem": problem})
    return command


def _checked_glob(pattern: str) -> str:
    problem = glob_problem(pattern)
    if problem is not None:
        raise PydanticCustomError("glob", "pattern {problem}", {"problem": problem})
    return pattern


def _checked_entry_point(value: str) -> str:
    if not _ENTRY_POINT_RE.fullmatch(value):
        raise PydanticCustomError(
            "entry_point", "must be a function name, or module:function on workspace tasks (e.g. add, calc.ops:add)"
        )
    return value


#: ``function`` (one-shot: a function of the generated program) or, on workspace tasks only,
#: ``package.module:function`` (imported from the workspace). Checked by a validator that says so in words;
#: the pattern is in the JSON Schema.
EntryPoint = Annotated[
    str, AfterValidator(_checked_entry_point), WithJsonSchema({"type": "string", "pattern": _ENTRY_POINT})
]
TaskCommand = Annotated[Command, AfterValidator(_checked_command)]
ProtectedGlob = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_GLOB_CHARS), AfterValidator(_checked_glob)
]


class Limits(Contract):
    """Resource limits for one sandbox run of a suite, enforced from outside the sandbox."""

    timeout_s: float = Field(10.0, gt=0, le=600, description="wall-clock limit for one run, seconds")
    memory_mb: int = Field(512, ge=16, le=65536, description="memory limit for one run, MiB")


class CallCase(Contract):
    """One call ``entry_point(*args, **kwargs)`` whose return value must equal ``expected`` (typed JSON, see
    ``workers.grading.compare``)."""

    id: CaseId | None = Field(None, description="stable case id results are keyed by; defaults to the index")
    args: list[Json] = Field(default_factory=list, description="positional arguments, plain JSON")
    kwargs: dict[str, Json] = Field(default_factory=dict, description="keyword arguments, plain JSON")
    expected: Json = Field(
        description="expected return value as typed JSON: plain JSON, tuples/sets/non-string-keyed dicts as "
        '{"$t": [...]}/{"$s": [...]}/{"$d": [[k, v], ...]} (compared outside the sandbox, with its own types)'
    )


class IoCase(Contract):
    """One run of the program with ``stdin``; stdout must equal ``expected_stdout`` modulo trailing blanks."""

    id: CaseId | None = Field(None, description="stable case id results are keyed by; defaults to the index")
    stdin: str = Field("", max_length=MAX_IO_CHARS, description="bytes fed to stdin, as UTF-8 text")
    expected_stdout: str = Field(max_length=MAX_IO_CHARS, description="expected stdout, compared outside")


_C = TypeVar("_C", CallCase, IoCase)


def _fill_ids(cases: list[_C]) -> list[_C]:
    """Give id-less cases their index as id and reject duplicates, so every result has a unique key."""
    filled = [c if c.id is not None else c.model_copy(update={"id": str(i)}) for i, c in enumerate(cases)]
    seen: set[str] = set()
    for case in filled:
        assert case.id is not None  # noqa: S101 - just filled
        if case.id in seen:
            raise PydanticCustomError("duplicate_case_id", "duplicate case id '{id}'", {"id": case.id})
        seen.add(case.id)
    return filled


class CallSuite(Contract):
    """Call tests: the sandbox returns values only; expected values never enter it."""

    kind: Literal["call"] = Field(description="suite kind discriminator")
    cases: list[CallCase] = Field(max_length=MAX_CASES, description="the calls; ids unique within the suite")
    atol: float = Field(1e-6, ge=0, description="absolute tolerance when comparing floats")

    @field_validator("cases")
    @classmethod
    def _ids(cls, cases: list[CallCase]) -> list[CallCase]:
        return _fill_ids(cases)

    def case_ids(self) -> list[str]:
        """Ids of every case, in order (each result must be keyed by one of them)."""
        return [c.id or str(i) for i, c in enumerate(self.cases)]


def _without_unset(data: dict[str, Any], *names: str) -> dict[str, Any]:
    """``data`` without the optional ``names`` that are unset (None or an empty list): fields added to v1 later
    are left out of the wire form when unused, so what predates them encodes byte for byte as it did."""
    for name in names:
        if name in data and (data[name] is None or data[name] == []):
            del data[name]
    return data


class IoSuite(Contract):
    """Stdin/stdout tests: the program's stdout is compared outside the sandbox."""

    kind: Literal["io"] = Field(description="suite kind discriminator")
    cases: list[IoCase] = Field(max_length=MAX_CASES, description="the runs; ids unique within the suite")
    command: TaskCommand | None = Field(
        None,
        description="workspace tasks only (and required there): what runs in the workspace for each case, a "
        "string under /bin/sh -c or an argv list, e.g. python -m calc; one-shot tasks run the program itself",
    )
    languages: list[Language] | None = Field(
        None,
        min_length=1,
        max_length=len(LANGUAGES),
        description='one-shot tasks only: the languages whose programs this suite accepts, e.g. ["cpp", '
        '"java"]; absent: every language',
    )

    @field_validator("cases")
    @classmethod
    def _ids(cls, cases: list[IoCase]) -> list[IoCase]:
        return _fill_ids(cases)

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(handler(self), "command", "languages")

    def case_ids(self) -> list[str]:
        """Ids of every case, in order (each result must be keyed by one of them)."""
        return [c.id or str(i) for i, c in enumerate(self.cases)]


class AssertSuite(Contract):
    """HumanEval-style ``def check(candidate): ...`` code run inside the sandbox: the weakest kind."""

    #: The single case id an assert suite reports (pass/fail of the whole ``check``).
    CASE_ID: ClassVar[str] = "check"

    kind: Literal["assert"] = Field(description="suite kind discriminator")
    code: str = Field(min_length=1, max_length=MAX_CODE_CHARS, description="defines check(candidate)")

    def case_ids(self) -> list[str]:
        """An assert suite is one case: the whole ``check(candidate)`` call."""
        return [self.CASE_ID]


class CommandSuite(Contract):
    """A command run in the agent's workspace (typically its own test suite): feedback only, never a gate.

    Why never a gate: the agent can edit what the command runs (its tests, their configuration), so its exit
    status proves nothing; the hidden ``call``/``io`` suites, compared outside the sandbox, decide.
    Workspace tasks only, and only as ``public_tests``.
    """

    kind: Literal["command"] = Field(description="suite kind discriminator")
    command: TaskCommand = Field(
        description="what runs in the workspace: a string under /bin/sh -c or an argv list, e.g. python -m pytest"
    )

    def case_ids(self) -> list[str]:
        """A command suite has no cases: its exit code and output are the feedback."""
        return []


#: A hidden suite (and, on one-shot tasks, a public one): what the one-shot grader runs.
TestSuite = Annotated[CallSuite | IoSuite | AssertSuite, Field(discriminator="kind")]
#: A public suite: on workspace tasks also a ``command``.
PublicSuite = Annotated[CallSuite | IoSuite | AssertSuite | CommandSuite, Field(discriminator="kind")]
AnyTaskSuite = CallSuite | IoSuite | AssertSuite | CommandSuite


class Archive(Contract):
    """A workspace stored as a tar (gzipped or not) in S3, pinned by its sha256: a changed object is refused."""

    url: S3Url = Field(description="s3://bucket/key of the tar, e.g. s3://tasks/swe/calc-1.tar.gz")
    sha256: Sha256 = Field(description="sha256 of the object's bytes, lowercase hex")


class Workspace(Contract):
    """The files an episode starts from: inline (path -> text, small tasks) or an archive (anything else)."""

    files: dict[str, str] | None = Field(
        None,
        max_length=MAX_INLINE_FILES,
        description="path -> UTF-8 text; paths normalised relative POSIX (no '..', no absolute, no empty or '.' "
        f"segments); at most {MAX_INLINE_FILES} files, {MAX_INLINE_BYTES} bytes in all",
    )
    archive: Archive | None = Field(None, description="the workspace as a tar in S3 (exactly one of files, archive)")

    @field_validator("files")
    @classmethod
    def _files(cls, files: dict[str, str] | None) -> dict[str, str] | None:
        if files is None:
            return None
        total = 0
        for path, text in files.items():
            problem = path_problem(path)
            if problem is not None:
                raise PydanticCustomError(
                    "workspace_path", "path {path} {problem}", {"path": repr(path[:200]), "problem": problem}
                )
            if not is_clean_text(text):
                raise PydanticCustomError(
                    "workspace_text", "file {path} is not valid UTF-8 (it holds a lone surrogate)", {"path": repr(path)}
                )
            total += len(text.encode("utf-8"))
        if total > MAX_INLINE_BYTES:
            raise PydanticCustomError(
                "workspace_size",
                "{total} bytes of inline files, over the {cap}-byte cap (use an archive)",
                {"total": total, "cap": MAX_INLINE_BYTES},
            )
        for path in files:
            clash = next((parent for parent in parents(path) if parent in files), None)
            if clash is not None:
                raise PydanticCustomError(
                    "workspace_path",
                    "{parent} is a file, so {path} cannot be under it",
                    {"parent": repr(clash), "path": repr(path)},
                )
        return files

    @model_validator(mode="after")
    def _one_source(self) -> Workspace:
        if (self.files is None) == (self.archive is None):
            raise PydanticCustomError(
                "workspace_source", "exactly one of files and archive must be set", {"field": "files"}
            )
        return self

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(handler(self), "files", "archive")

    def inline_bytes(self) -> int:
        """UTF-8 bytes of the inline files (0 for an archive: its size is known once it is fetched)."""
        return sum(len(text.encode("utf-8")) for text in (self.files or {}).values())


class EpisodeLimits(Contract):
    """Bounds of one episode of a workspace task, enforced by the episode worker.

    ``max_turns`` counts the actions after ``open``/``fork``; the step that reaches it, or the step running
    when ``episode_timeout_s`` passes, ends the episode and the workspace is submitted as it is. No action
    for ``idle_timeout_s`` means the trainer is gone: the episode ends ``abandoned`` (no reward, said so).
    """

    max_turns: int = Field(50, ge=1, le=MAX_TURNS, description="most actions after open/fork")
    step_timeout_s: float = Field(
        10.0, gt=0, le=600, description="wall-clock limit of one step; an exec's timeout_s is capped to it"
    )
    episode_timeout_s: float = Field(1800.0, gt=0, le=86_400, description="wall-clock limit of the whole episode")
    idle_timeout_s: float = Field(
        300.0, gt=0, le=86_400, description="an episode without an action this long is abandoned"
    )
    workspace_max_mb: int = Field(64, ge=1, le=4096, description="size cap of the workspace, MiB, during a step too")
    workspace_max_files: int = Field(
        5000, ge=1, le=100_000, description="entry cap of the workspace (files, directories, links)"
    )

    @model_validator(mode="after")
    def _step_fits(self) -> EpisodeLimits:
        if self.step_timeout_s > self.episode_timeout_s:
            raise PydanticCustomError("step_timeout", "is longer than episode_timeout_s", {"field": "step_timeout_s"})
        return self


class _TaskBase(Contract):
    """Fields shared by the full task and its public view."""

    version_field: ClassVar[str] = "schema"
    #: Tasks are read from files, not Kafka: one JSONL line may be larger than an event.
    max_bytes: ClassVar[int] = 16 * 1024 * 1024

    schema_: str = Field(TASK_SCHEMA, alias="schema", description="format id, rewardstream.task/v<major>")
    task_id: TaskId = Field(description="unique task id, e.g. HumanEval/0")
    language: Language = Field(
        "python", description="language of the reference solution; a generation may use any its suites accept"
    )
    prompt: str = Field(max_length=MAX_PROMPT_CHARS, description="what the policy is asked to write")
    entry_point: EntryPoint | None = Field(
        None,
        description="function called by call/assert tests; on workspace tasks module:function (e.g. calc.ops:add), "
        "imported with the workspace as the working directory",
    )
    limits: Limits = Field(default_factory=Limits, description="time and memory per sandbox run")
    workspace: Workspace | None = Field(
        None, description="the files an agent's episode starts from; set only on workspace tasks"
    )
    episode: EpisodeLimits | None = Field(
        None, description="limits of an episode (workspace tasks only; the defaults when absent)"
    )
    protected: list[ProtectedGlob] = Field(
        default_factory=list,
        max_length=MAX_GLOBS,
        description="gitignore-style globs (workspace tasks only) reset to the original workspace before any "
        "grading run, e.g. tests/**, **/conftest.py, **/*.pth; a leading **/ also matches the root",
    )

    @classmethod
    def parse_version(cls, raw: object) -> tuple[int, int] | None:
        """``(major, minor)`` from ``rewardstream.task/v<major>[.<minor>]``."""
        if not isinstance(raw, str):
            return None
        match = _TASK_SCHEMA_RE.match(raw)
        return (int(match.group(1)), int(match.group(2) or 0)) if match else None

    @classmethod
    def version_string(cls) -> str:
        """The schema id this code writes."""
        return TASK_SCHEMA

    @field_validator("schema_")
    @classmethod
    def _schema(cls, value: str) -> str:
        return cls.check_version(value)

    def _suites(self) -> list[tuple[str, AnyTaskSuite]]:
        """The suites with their field names."""
        return []

    @property
    def episode_limits(self) -> EpisodeLimits:
        """The episode limits of a workspace task (the defaults when the task gives none)."""
        return self.episode or EpisodeLimits()

    @model_validator(mode="after")
    def _entry_point_needed(self) -> _TaskBase:
        if self.entry_point is None and any(s.kind in ("call", "assert") for _, s in self._suites()):
            raise PydanticCustomError(
                "entry_point_required", "required for call and assert tests", {"field": "entry_point"}
            )
        return self

    @model_validator(mode="after")
    def _workspace_rules(self) -> _TaskBase:
        if self.workspace is None:
            _one_shot_rules(self.entry_point, self.episode, self.protected, self._suites())
        else:
            _workspace_task_rules(self.entry_point, self.workspace, self.episode_limits, self._suites())
        return self

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(handler(self), "workspace", "episode", "protected")


def _refuse(field: str, message: str) -> PydanticCustomError:
    return PydanticCustomError("workspace_task", message, {"field": field})


def _one_shot_rules(
    entry_point: str | None, episode: EpisodeLimits | None, protected: list[str], suites: list[tuple[str, AnyTaskSuite]]
) -> None:
    """A task without a workspace grades one program: nothing of an episode applies to it."""
    if entry_point is not None and ":" in entry_point:
        raise _refuse("entry_point", "module:function is for workspace tasks; a one-shot program names its function")
    if episode is not None:
        raise _refuse("episode", "is only for workspace tasks")
    if protected:
        raise _refuse("protected", "is only for workspace tasks")
    for name, suite in suites:
        if isinstance(suite, CommandSuite):
            raise _refuse(f"{name}.kind", "a command suite runs in a workspace: only workspace tasks may have one")
        if isinstance(suite, IoSuite) and suite.command is not None:
            raise _refuse(f"{name}.command", "is only for workspace tasks (a one-shot io suite runs the program)")


def _workspace_task_rules(
    entry_point: str | None, workspace: Workspace, limits: EpisodeLimits, suites: list[tuple[str, AnyTaskSuite]]
) -> None:
    """A workspace task is graded from the agent's final workspace, outside anything the agent controls."""
    if entry_point is not None and ":" not in entry_point:
        raise _refuse("entry_point", "a workspace task's entry point is module:function, imported from the workspace")
    for name, suite in suites:
        if isinstance(suite, AssertSuite):
            raise _refuse(
                f"{name}.kind",
                "assert suites are not allowed on workspace tasks: their check code would run inside the agent's "
                "workspace, whose conftest.py, sitecustomize.py and modules the agent wrote; use call or io, "
                "compared outside the sandbox",
            )
        if isinstance(suite, IoSuite) and suite.command is None:
            raise _refuse(f"{name}.command", "required on workspace tasks: what reads stdin, e.g. python -m calc")
        if isinstance(suite, IoSuite) and suite.languages is not None:
            raise _refuse(f"{name}.languages", "is only for one-shot tasks (a workspace task's command decides)")
    if workspace.files is not None:
        entries = len(workspace.files) + len({p for path in workspace.files for p in parents(path)})
        if entries > limits.workspace_max_files:
            raise _refuse(
                "workspace.files",
                f"{entries} files and directories, over episode.workspace_max_files ({limits.workspace_max_files})",
            )
        size = workspace.inline_bytes()
        if size > limits.workspace_max_mb * 1024 * 1024:
            raise _refuse(
                "workspace.files", f"{size} bytes, over episode.workspace_max_mb ({limits.workspace_max_mb} MiB)"
            )


def suite_languages(suite: AnyTaskSuite) -> frozenset[str] | None:
    """The languages ``suite`` accepts (None: every one). Call and assert suites call a Python function in
    the candidate's process, so they accept python only; an io suite runs any program."""
    if isinstance(suite, IoSuite):
        return None if suite.languages is None else frozenset(suite.languages)
    return frozenset({"python"})


def language_problem(task: _TaskBase, language: str) -> str | None:
    """Why ``task`` cannot grade a solution in ``language`` (every suite must accept it), or None."""
    if language not in LANGUAGES:
        return f"unknown language {language!r} (known: {', '.join(LANGUAGES)})"
    if task.workspace is not None and language != "python":
        return f"task {task.task_id} is a workspace task: its suites run the task's own commands, in python"
    for name, suite in task._suites():
        accepted = suite_languages(suite)
        if accepted is not None and language not in accepted:
            kinds = "a call or assert suite calls a Python function" if suite.kind != "io" else "its io suite"
            return (
                f"task {task.task_id} does not accept {language}: {name} accepts {', '.join(sorted(accepted))} "
                f"({kinds})"
            )
    return None


_HIDDEN_COMMAND = (
    "a command suite is feedback only, never a gate (the agent can change what it runs): hidden tests are call "
    "or io, compared outside the sandbox"
)


class Task(_TaskBase):
    """A full task, including hidden tests: only the registry and verifier workers may read it."""

    public_tests: PublicSuite | None = Field(
        None, description="tests whose feedback the trainer may see (command: workspace tasks only)"
    )
    hidden_tests: TestSuite = Field(description="tests that decide the reward; never shown to trainers")

    @field_validator("hidden_tests", mode="before")
    @classmethod
    def _no_hidden_command(cls, value: object) -> object:
        if isinstance(value, dict) and value.get("kind") == "command":
            raise PydanticCustomError("hidden_command", _HIDDEN_COMMAND, {"field": "kind"})
        return value

    def _suites(self) -> list[tuple[str, AnyTaskSuite]]:
        named = (("public_tests", self.public_tests), ("hidden_tests", self.hidden_tests))
        return [(name, s) for name, s in named if s is not None]

    def public(self) -> PublicTask:
        """The part of this task a trainer may read (no hidden tests)."""
        return PublicTask.model_validate(
            self.model_dump(exclude={"hidden_tests"}, by_alias=True, mode="python", round_trip=True)
        )


class PublicTask(_TaskBase):
    """What trainers and executor workers see of a task: everything except the hidden tests.

    A workspace task's files, episode limits and protected globs are public: the workspace is where the agent
    starts (its files are the agent's to read), and protected paths only say what is reset before grading.
    """

    public_tests: PublicSuite | None = Field(
        None, description="tests whose feedback the trainer may see (command: workspace tasks only)"
    )

    def _suites(self) -> list[tuple[str, AnyTaskSuite]]:
        return [("public_tests", self.public_tests)] if self.public_tests is not None else []

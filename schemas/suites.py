"""The test suites of a task: ``call`` and ``io`` (compared outside the sandbox), ``assert`` (HumanEval's
check code, run inside it) and ``command`` (a workspace task's own tests: feedback, never a gate).

Every case has a stable ``id`` (its index unless given) so the grader can key each result by it: a case
without a result is a failure.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    field_validator,
    model_serializer,
)
from pydantic_core import PydanticCustomError

from schemas.codec import Contract, Json
from schemas.text import is_clean_text

#: Caps that keep one task line well under the registry's per-line limit.
MAX_CODE_CHARS = 256 * 1024
MAX_IO_CHARS = 1024 * 1024
MAX_CASES = 10_000
#: A command (``/bin/sh -c`` string, or argv joined) is at most this many characters, argv this many items.
MAX_COMMAND_CHARS = 32 * 1024
MAX_ARGV = 1024

CaseId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
#: The languages a solution may be written in (``workers.languages`` knows how each is built and run;
#: SandboxFusion's names are aliases there, e.g. nodejs for javascript). python is the default everywhere.
Language = Literal[
    "python", "c", "cpp", "java", "javascript", "typescript", "go", "rust", "bash", "php", "ruby", "lua", "perl",
    "r", "csharp", "kotlin", "scala", "racket", "verilog", "d",
]  # fmt: skip
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


TaskCommand = Annotated[Command, AfterValidator(_checked_command)]


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


def without_unset(data: dict[str, Any], *names: str) -> dict[str, Any]:
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
        return without_unset(handler(self), "command", "languages")

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


def suite_languages(suite: AnyTaskSuite) -> frozenset[str] | None:
    """The languages ``suite`` accepts (None: every one). Call and assert suites call a Python function in
    the candidate's process, so they accept python only; an io suite runs any program."""
    if isinstance(suite, IoSuite):
        return None if suite.languages is None else frozenset(suite.languages)
    return frozenset({"python"})

"""The task format ``rewardstream.task/v1``: a prompt plus public and hidden test suites.

Hidden tests decide rewards, so they live only in ``Task``; anything a trainer may read is a
``PublicTask`` (``Task.public()``). Every test case has a stable ``id`` (its index unless given) so the
grader can key each result by it: a case without a result is a failure.
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal, TypeVar

from pydantic import Field, StringConstraints, field_validator, model_validator
from pydantic_core import PydanticCustomError

from schemas.codec import Contract, Json

TASK_SCHEMA = "rewardstream.task/v1"
_TASK_SCHEMA_RE = re.compile(r"^rewardstream\.task/v(0|[1-9][0-9]{0,5})(?:\.(0|[1-9][0-9]{0,5}))?$")

#: Caps that keep one task line well under the registry's per-line limit.
MAX_PROMPT_CHARS = 64 * 1024
MAX_CODE_CHARS = 256 * 1024
MAX_IO_CHARS = 1024 * 1024
MAX_CASES = 10_000

TaskId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")]
CaseId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
Identifier = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
Language = Literal["python"]


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


class IoSuite(Contract):
    """Stdin/stdout tests: the program's stdout is compared outside the sandbox."""

    kind: Literal["io"] = Field(description="suite kind discriminator")
    cases: list[IoCase] = Field(max_length=MAX_CASES, description="the runs; ids unique within the suite")

    @field_validator("cases")
    @classmethod
    def _ids(cls, cases: list[IoCase]) -> list[IoCase]:
        return _fill_ids(cases)

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


TestSuite = Annotated[CallSuite | IoSuite | AssertSuite, Field(discriminator="kind")]


class _TaskBase(Contract):
    """Fields shared by the full task and its public view."""

    version_field: ClassVar[str] = "schema"
    #: Tasks are read from files, not Kafka: one JSONL line may be larger than an event.
    max_bytes: ClassVar[int] = 16 * 1024 * 1024

    schema_: str = Field(TASK_SCHEMA, alias="schema", description="format id, rewardstream.task/v<major>")
    task_id: TaskId = Field(description="unique task id, e.g. HumanEval/0")
    language: Language = Field("python", description="language of the solution")
    prompt: str = Field(max_length=MAX_PROMPT_CHARS, description="what the policy is asked to write")
    entry_point: Identifier | None = Field(None, description="function called by call/assert tests")
    limits: Limits = Field(default_factory=Limits, description="time and memory per sandbox run")

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

    def _suites(self) -> list[CallSuite | IoSuite | AssertSuite]:
        return []

    @model_validator(mode="after")
    def _entry_point_needed(self) -> _TaskBase:
        if self.entry_point is None and any(s.kind != "io" for s in self._suites()):
            raise PydanticCustomError(
                "entry_point_required", "required for call and assert tests", {"field": "entry_point"}
            )
        return self


class Task(_TaskBase):
    """A full task, including hidden tests: only the registry and verifier workers may read it."""

    public_tests: TestSuite | None = Field(None, description="tests whose feedback the trainer may see")
    hidden_tests: TestSuite = Field(description="tests that decide the reward; never shown to trainers")

    def _suites(self) -> list[CallSuite | IoSuite | AssertSuite]:
        return [s for s in (self.public_tests, self.hidden_tests) if s is not None]

    def public(self) -> PublicTask:
        """The part of this task a trainer may read (no hidden tests)."""
        return PublicTask.model_validate(
            self.model_dump(exclude={"hidden_tests"}, by_alias=True, mode="python", round_trip=True)
        )


class PublicTask(_TaskBase):
    """What trainers and executor workers see of a task: everything except the hidden tests."""

    public_tests: TestSuite | None = Field(None, description="tests whose feedback the trainer may see")

    def _suites(self) -> list[CallSuite | IoSuite | AssertSuite]:
        return [self.public_tests] if self.public_tests is not None else []

"""The task format ``rewardstream.task/v1``: a prompt plus public and hidden test suites.

Hidden tests decide rewards, so they live only in ``Task``; anything a trainer may read is a
``PublicTask`` (``Task.public()``). Every test case has a stable ``id`` (its index unless given) so the
grader can key each result by it: a case without a result is a failure (``schemas.suites``).

A task's version is its content digest (``task_version``); a public view names the version it is a view of,
so executors, judges and trainers, who never read the hidden tests, can still say which task they saw.

A *workspace task* (one with ``workspace``) is for agents acting over many turns: the episode starts from
its files, ``episode`` bounds it, ``protected`` globs are reset to the original before any grading run, its
public suite may be a ``command`` (the agent's own test run: feedback, never a gate), and its hidden suite is
``call`` (``entry_point`` is ``module:function``, imported from the workspace) or ``io`` with a ``command``.
Every field a workspace task adds is optional and left out of the wire form when unset, so a task without
them parses and encodes exactly as before (and a reader that predates them refuses a workspace task instead
of grading it as a one-shot program).
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Any, ClassVar

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

from schemas.codec import Contract, Sha256, encode
from schemas.environments import Oracle, TaskEnvironment, VerifierSuite, image_task_rules
from schemas.errors import ValidationError
from schemas.globs import MAX_GLOBS
from schemas.suites import (
    LANGUAGES,
    MAX_ARGV,
    MAX_CASES,
    MAX_CODE_CHARS,
    MAX_COMMAND_CHARS,
    MAX_IO_CHARS,
    AnyTaskSuite,
    AssertSuite,
    CallCase,
    CallSuite,
    CaseId,
    Command,
    CommandSuite,
    IoCase,
    IoSuite,
    Language,
    PublicSuite,
    TestSuite,
    command_problem,
    suite_languages,
    without_unset,
)
from schemas.workspaces import (
    MAX_INLINE_BYTES,
    MAX_INLINE_FILES,
    MAX_TURNS,
    Archive,
    EpisodeLimits,
    ProtectedGlob,
    Workspace,
    one_shot_rules,
    workspace_task_rules,
)

#: The task format's parts, defined in ``schemas.suites`` and ``schemas.workspaces``, are this module's too.
__all__ = [
    "LANGUAGES",
    "MAX_ARGV",
    "MAX_CASES",
    "MAX_CODE_CHARS",
    "MAX_COMMAND_CHARS",
    "MAX_INLINE_BYTES",
    "MAX_INLINE_FILES",
    "MAX_IO_CHARS",
    "MAX_PROMPT_CHARS",
    "MAX_TURNS",
    "TASK_SCHEMA",
    "AnyTaskSuite",
    "Archive",
    "AssertSuite",
    "CallCase",
    "CallSuite",
    "CaseId",
    "Command",
    "CommandSuite",
    "EntryPoint",
    "EpisodeLimits",
    "HiddenSuite",
    "Identifier",
    "ImageTaskError",
    "IoCase",
    "IoSuite",
    "Language",
    "Limits",
    "Oracle",
    "ProtectedGlob",
    "PublicSuite",
    "PublicTask",
    "Task",
    "TaskEnvironment",
    "TaskId",
    "TestSuite",
    "VerifierSuite",
    "Workspace",
    "command_problem",
    "language_problem",
    "suite_languages",
    "task_version",
]

TASK_SCHEMA = "rewardstream.task/v1"
_TASK_SCHEMA_RE = re.compile(r"^rewardstream\.task/v(0|[1-9][0-9]{0,5})(?:\.(0|[1-9][0-9]{0,5}))?$")

#: Caps that keep one task line well under the registry's per-line limit (the suites' own: ``schemas.suites``).
MAX_PROMPT_CHARS = 64 * 1024

_IDENT = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
TaskId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")]
Identifier = Annotated[str, StringConstraints(pattern=rf"^{_IDENT}$")]
_ENTRY_POINT = rf"^(?:{_IDENT}(?:\.{_IDENT}){{0,31}}:)?{_IDENT}$"
_ENTRY_POINT_RE = re.compile(_ENTRY_POINT)


def _checked_entry_point(value: str) -> str:
    if not _ENTRY_POINT_RE.fullmatch(value):
        raise PydanticCustomError(
            "entry_point", "must be a function name, or module:function on workspace tasks (e.g. add, calc.ops:add)"
        )
    return value


#: ``function`` (one-shot: a function of the generated program) or, on workspace tasks only,
#: ``package.module:function`` (imported from the workspace). Checked by a validator that says so in words;
#: the pattern is in the JSON Schema.
#: What decides a task's reward: a one-shot or workspace task's suite, or an image task's verifier.
HiddenSuite = Annotated[CallSuite | IoSuite | AssertSuite | VerifierSuite, Field(discriminator="kind")]

EntryPoint = Annotated[
    str, AfterValidator(_checked_entry_point), WithJsonSchema({"type": "string", "pattern": _ENTRY_POINT})
]


class Limits(Contract):
    """Resource limits for one sandbox run of a suite, enforced from outside the sandbox."""

    timeout_s: float = Field(10.0, gt=0, le=600, description="wall-clock limit for one run, seconds")
    memory_mb: int = Field(512, ge=16, le=65536, description="memory limit for one run, MiB")


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
    environment: TaskEnvironment | None = Field(
        None,
        description="image tasks only (the Harbor format): the container the agent works in, built from the "
        "task's environment/, and its resources",
    )
    episode: EpisodeLimits | None = Field(
        None, description="limits of an episode (workspace and image tasks; the defaults when absent)"
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
        needs = self.environment is None  # an image task's own rules refuse any such suite, saying why
        if needs and self.entry_point is None and any(s.kind in ("call", "assert") for _, s in self._suites()):
            raise PydanticCustomError(
                "entry_point_required", "required for call and assert tests", {"field": "entry_point"}
            )
        return self

    def _verifier(self) -> VerifierSuite | None:
        """The verifier that decides an image task's reward (None: not an image task, or a public view)."""
        return None

    @model_validator(mode="after")
    def _workspace_rules(self) -> _TaskBase:
        if self.environment is not None or self._verifier() is not None:
            image_task_rules(
                environment=self.environment,
                workspace=self.workspace,
                entry_point=self.entry_point,
                protected=self.protected,
                suites=list(self._suites()),
                verifier=self._verifier(),
                hidden=isinstance(self, Task),
            )
        elif self.workspace is None:
            one_shot_rules(self.entry_point, self.episode, self.protected, self._suites())
        else:
            workspace_task_rules(self.entry_point, self.workspace, self.episode_limits, self._suites())
        return self

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(handler(self), "workspace", "environment", "episode", "protected")


class ImageTaskError(ValidationError):
    """An image task was given to what grades one-shot or workspace tasks."""


_HIDDEN_COMMAND = (
    "a command suite is feedback only, never a gate (the agent can change what it runs): hidden tests are call "
    "or io, compared outside the sandbox"
)


class Task(_TaskBase):
    """A full task, including hidden tests: only the registry and verifier workers may read it."""

    public_tests: PublicSuite | None = Field(
        None, description="tests whose feedback the trainer may see (command: workspace tasks only)"
    )
    hidden_tests: HiddenSuite = Field(description="tests that decide the reward; never shown to trainers")
    solution: Oracle | None = Field(
        None, description="image tasks only: the reference solution (solution/solve.sh); never shown to trainers"
    )
    canary: bool = Field(
        False,
        description="a canary: tests that contradict the statement, so any reward above 0 is a detected hack; its "
        "rewards are never valid for training. Hidden like the tests (not in the public view); left out when false",
    )

    @field_validator("hidden_tests", mode="before")
    @classmethod
    def _no_hidden_command(cls, value: object) -> object:
        if isinstance(value, dict) and value.get("kind") == "command":
            raise PydanticCustomError("hidden_command", _HIDDEN_COMMAND, {"field": "kind"})
        return value

    def _suites(self) -> list[tuple[str, AnyTaskSuite]]:
        named = (("public_tests", self.public_tests), ("hidden_tests", self.hidden_tests))
        return [(name, s) for name, s in named if s is not None and not isinstance(s, VerifierSuite)]

    def _verifier(self) -> VerifierSuite | None:
        return self.hidden_tests if isinstance(self.hidden_tests, VerifierSuite) else None

    @property
    def graded_suite(self) -> CallSuite | IoSuite | AssertSuite:
        """The hidden suite the grader runs: a one-shot or workspace task's (an image task's verifier runs in
        its own container: ImageTaskError)."""
        if isinstance(self.hidden_tests, VerifierSuite):
            raise ImageTaskError(f"task {self.task_id} is an image task: its verifier grades it, not a test suite")
        return self.hidden_tests

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = without_unset(handler(self), "workspace", "environment", "episode", "protected", "solution")
        if not self.canary:  # a task that is no canary keeps its version (the digest of these bytes)
            data.pop("canary", None)
        return data

    def public(self) -> PublicTask:
        """The part of this task a trainer may read (no hidden tests, no solution, not whether it is a canary),
        naming its version."""
        hidden = {"hidden_tests", "solution", "canary"}
        view = self.model_dump(exclude=hidden, by_alias=True, mode="python", round_trip=True)
        return PublicTask.model_validate({**view, "task_version": task_version(self)})


class PublicTask(_TaskBase):
    """What trainers and executor workers see of a task: everything except the hidden tests.

    A workspace task's files, episode limits and protected globs are public: the workspace is where the agent
    starts (its files are the agent's to read), and protected paths only say what is reset before grading.
    """

    public_tests: PublicSuite | None = Field(
        None, description="tests whose feedback the trainer may see (command: workspace tasks only)"
    )
    task_version: Sha256 | None = Field(
        None,
        description="the version of the full task this is a view of (task_version: the sha256 of its wire bytes); "
        "set by the registry, left out when unknown",
    )

    def _suites(self) -> list[tuple[str, AnyTaskSuite]]:
        return [("public_tests", self.public_tests)] if self.public_tests is not None else []

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(handler(self), "workspace", "environment", "episode", "protected", "task_version")


def task_version(task: Task) -> str:
    """A task's version: the sha256 (hex) of its canonical wire bytes (``encode(task)``, hidden tests included).

    Why the content: the same task loaded twice is the same version, a corrected one is another, and any
    reader can check the bytes it holds against the version it was asked for. A generation is graded against
    exactly one version by every role (``GenerationEvent.task_version``, or the latest when it names none).
    """
    return hashlib.sha256(encode(task)).hexdigest()


def language_problem(task: Task | PublicTask, language: str) -> str | None:
    """Why ``task`` cannot grade a solution in ``language`` (every suite must accept it), or None."""
    if language not in LANGUAGES:
        return f"unknown language {language!r} (known: {', '.join(LANGUAGES)})"
    if task.environment is not None:
        return f"task {task.task_id} is an image task: it is solved in episodes and graded by its verifier"
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

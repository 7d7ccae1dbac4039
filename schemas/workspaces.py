"""What a workspace task adds to a task: the files an episode starts from (``Workspace``, inline or an
``Archive`` in S3), the episode's limits, the globs protected from the agent, and the rules that keep
one-shot and workspace tasks apart (a one-shot task has none of this; a workspace task no assert suite).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from schemas.caps import QUOTE_CHARS
from schemas.codec import Contract, S3Url, Sha256
from schemas.globs import MAX_GLOB_CHARS, glob_problem
from schemas.paths import parents, path_problem
from schemas.suites import AnyTaskSuite, AssertSuite, CommandSuite, IoSuite, without_unset
from schemas.text import is_clean_text

#: Inline workspace files: at most this many, of at most this many UTF-8 bytes in all (larger: an archive).
MAX_INLINE_FILES = 1000
MAX_INLINE_BYTES = 8 * 1024 * 1024
#: Turns of one episode (as ``turn`` on events).
MAX_TURNS = 10_000


def _checked_glob(pattern: str) -> str:
    problem = glob_problem(pattern)
    if problem is not None:
        raise PydanticCustomError("glob", "pattern {problem}", {"problem": problem})
    return pattern


ProtectedGlob = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_GLOB_CHARS), AfterValidator(_checked_glob)
]


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
                    "workspace_path", "path {path} {problem}", {"path": repr(path[:QUOTE_CHARS]), "problem": problem}
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
        return without_unset(handler(self), "files", "archive")

    def inline_bytes(self) -> int:
        """UTF-8 bytes of the inline files (0 for an archive: its size is known once it is fetched)."""
        return sum(len(text.encode("utf-8")) for text in (self.files or {}).values())


class EpisodeLimits(Contract):
    """Bounds of one episode of a workspace task, enforced by the episode worker.

    ``max_turns`` counts the actions after ``open``/``fork``; the step that reaches it, or the step running
    when ``episode_timeout_s`` passes, ends the episode and the workspace is submitted as it is. No action
    for ``idle_timeout_s`` means the trainer is gone: the episode ends ``abandoned`` (no reward, said so).

    ``idle_timeout_s`` is the trainer's time to answer an observation, counted from when the worker committed
    it: a step's own run (up to ``step_timeout_s``) and a worker's backlog never count. So the two limits are
    independent, and an ``idle_timeout_s`` below ``step_timeout_s`` is valid (a trainer that answers fast
    running long test suites).
    """

    max_turns: int = Field(50, ge=1, le=MAX_TURNS, description="most actions after open/fork")
    step_timeout_s: float = Field(
        10.0, gt=0, le=600, description="wall-clock limit of one step; an exec's timeout_s is capped to it"
    )
    episode_timeout_s: float = Field(1800.0, gt=0, le=86_400, description="wall-clock limit of the whole episode")
    idle_timeout_s: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description="an episode whose trainer sends no action this long after the last observation was committed "
        "is abandoned (a step's own run and the worker's backlog never count; independent of step_timeout_s)",
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


def _refuse(field: str, message: str) -> PydanticCustomError:
    return PydanticCustomError("workspace_task", message, {"field": field})


def one_shot_rules(
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


def workspace_task_rules(
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

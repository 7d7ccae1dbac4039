"""What an image task adds to a task (the Harbor format): the container its episodes run in, built from the
task's own ``environment/`` (``TaskEnvironment``, public: the agent works in it), the verifier that decides its
reward in a fresh container of that image (``VerifierSuite``, hidden) and the oracle that shows it can be solved
(``Oracle``, hidden).

Each directory of the task travels as a ``PackedTree``: the canonical tar the episode snapshots use (regular
files, directories, symlinks; owner-execute bit only; sorted), base64 in the task's JSON, pinned by its sha256.
Why a canonical tar: the same directory is the same bytes on every machine, so a task's version (its content
digest) and its image's address change only when a file does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, SerializerFunctionWrapHandler, StringConstraints, model_serializer, model_validator
from pydantic_core import PydanticCustomError

from schemas.codec import Contract, Sha256
from schemas.suites import without_unset

#: Decoded bytes of one packed tree: the environment's build context, and the tests' or the solution's files.
#: With base64 (4/3) they keep a task line under the registry's 16 MiB.
MAX_CONTEXT_BYTES = 6 * 1024 * 1024
MAX_FILES_BYTES = 1024 * 1024
_B64_CHARS = (MAX_CONTEXT_BYTES * 4) // 3 + 4
#: Environment variables a task sets, each name and value.
MAX_ENV_VARS = 256
MAX_ENV_VALUE_CHARS = 4096
#: Longest a verifier, a build or an agent may run: a day.
MAX_TASK_SECONDS = 86_400.0

EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
EnvValue = Annotated[str, StringConstraints(max_length=MAX_ENV_VALUE_CHARS, pattern=r"^[^\x00]*$")]
TaskEnv = Annotated[dict[EnvName, EnvValue], Field(max_length=MAX_ENV_VARS)]
#: An absolute POSIX path in the container, no NUL, no ``..`` segment (checked below).
ContainerPath = Annotated[str, StringConstraints(pattern=r"^/[^\x00]{0,4095}$")]
#: A container image reference (``name[:tag][@sha256:...]``), as docker accepts them.
ImageRef = Annotated[
    str,
    StringConstraints(
        pattern=r"^[a-z0-9][a-z0-9._/-]{0,254}(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
    ),
]


#: Where a verifier stages the tests, writes the reward and an oracle its solution: never part of a WORKDIR.
RESERVED_DIRS = ("/tests", "/logs", "/solution")


def _within(path: str, directory: str) -> bool:
    """True when ``path`` is ``directory`` or lies under it (both absolute, normalised)."""
    path, directory = path.rstrip("/") or "/", directory.rstrip("/") or "/"
    return path == directory or path.startswith(directory + "/")


class PackedTree(Contract):
    """A directory as its canonical tar, base64, with the sha256 of the tar's bytes (checked on every read)."""

    tar_b64: str = Field(max_length=_B64_CHARS, description="the canonical tar of the directory, base64")
    sha256: Sha256 = Field(description="sha256 of the tar's bytes, lowercase hex: the directory's address")

    @model_validator(mode="after")
    def _pinned(self) -> PackedTree:
        try:
            data = base64.b64decode(self.tar_b64, validate=True)
        except (binascii.Error, ValueError):
            raise PydanticCustomError("packed_tree", "tar_b64 is not base64", {"field": "tar_b64"}) from None
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise PydanticCustomError("packed_tree", "sha256 is not the digest of the tar", {"field": "sha256"})
        return self

    @classmethod
    def of(cls, tar: bytes) -> PackedTree:
        """The packed form of ``tar`` (bytes a canonical packer wrote)."""
        return cls(tar_b64=base64.b64encode(tar).decode("ascii"), sha256=hashlib.sha256(tar).hexdigest())

    def tar(self) -> bytes:
        """The tar's bytes."""
        return base64.b64decode(self.tar_b64)

    def size(self) -> int:
        """Bytes of the tar, without decoding it."""
        padding = self.tar_b64[-2:].count("=")
        return len(self.tar_b64) * 3 // 4 - padding


def _capped(tree: PackedTree | None, cap: int, field: str) -> None:
    if tree is not None and tree.size() > cap:
        raise PydanticCustomError(
            "tree_size", "{field} is {size} bytes packed, over the {cap}-byte cap", {"field": field,
            "size": tree.size(), "cap": cap},
        )  # fmt: skip


class TaskEnvironment(Contract):
    """The container an image task's episodes run in, and its resource class (from ``task.toml``).

    The image is built by the product from ``context`` (the task's ``environment/``, its ``Dockerfile`` at the
    root), once per host, before any step; ``docker_image`` names a prebuilt one, used where images are pulled
    (with a context too, a host that sources images locally builds the context instead).
    """

    context: PackedTree | None = Field(None, description="the build context: the task's environment/ directory")
    docker_image: ImageRef | None = Field(None, description="a prebuilt image, e.g. org/task:20251031")
    workdir: ContainerPath = Field(
        description="where the agent works and what the verifier receives: the image's WORKDIR, or task.toml's; "
        "never / itself"
    )
    cpus: float = Field(1.0, gt=0, le=64, description="CPUs of one container")
    memory_mb: int = Field(2048, ge=64, le=262_144, description="memory of one container, MiB")
    storage_mb: int = Field(10_240, ge=16, le=1_048_576, description="disk an episode may add, MiB")
    build_timeout_s: float = Field(600.0, gt=0, le=MAX_TASK_SECONDS, description="longest the image build may take")
    env: TaskEnv = Field(default_factory=dict, description="variables every command of the episode sees")

    @model_validator(mode="after")
    def _checked(self) -> TaskEnvironment:
        if self.context is None and self.docker_image is None:
            raise PydanticCustomError("environment", "needs a context or a docker_image", {"field": "context"})
        _capped(self.context, MAX_CONTEXT_BYTES, "context")
        if any(part in (".", "..") for part in self.workdir.split("/")):
            raise PydanticCustomError("environment", "workdir has a . or .. segment", {"field": "workdir"})
        if self.workdir.strip("/") == "":
            raise PydanticCustomError(
                "environment",
                "workdir is /: the verifier receives the agent's WORKDIR, so it must be a directory of its own "
                "(set WORKDIR in the Dockerfile, e.g. /app, or [environment] workdir)",
                {"field": "workdir"},
            )
        reserved = next((r for r in RESERVED_DIRS if _within(self.workdir, r) or _within(r, self.workdir)), None)
        if reserved is not None:
            raise PydanticCustomError(
                "environment",
                "workdir {workdir} overlaps {reserved}, where the verifier stages what the agent must not reach",
                {"field": "workdir", "workdir": self.workdir, "reserved": reserved},
            )
        return self

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(handler(self), "context", "docker_image")


class VerifierSuite(Contract):
    """A Harbor verifier: ``tests/`` staged at ``/tests`` of a fresh container holding only the agent's final
    ``workdir``; ``test.sh`` writes the reward to ``/logs/verifier/reward.json`` or ``reward.txt``.
    Image tasks only, and only as ``hidden_tests``."""

    #: The single case id a verifier reports: the reward it wrote.
    CASE_ID: ClassVar[str] = "reward"

    kind: Literal["verifier"] = Field(description="suite kind discriminator")
    tests: PackedTree = Field(description="the task's tests/ directory, test.sh at its root")
    timeout_s: float = Field(600.0, gt=0, le=MAX_TASK_SECONDS, description="longest test.sh may run")
    env: TaskEnv = Field(default_factory=dict, description="variables test.sh sees")

    @model_validator(mode="after")
    def _checked(self) -> VerifierSuite:
        _capped(self.tests, MAX_FILES_BYTES, "tests")
        return self

    def case_ids(self) -> list[str]:
        """One case: the reward the verifier wrote."""
        return [self.CASE_ID]


class Oracle(Contract):
    """A task's reference solution (``solution/``, ``solve.sh`` at its root): what shows the task is solvable.
    Hidden, as the tests are."""

    solution: PackedTree = Field(description="the task's solution/ directory, solve.sh at its root")
    env: TaskEnv = Field(default_factory=dict, description="variables solve.sh sees")

    @model_validator(mode="after")
    def _checked(self) -> Oracle:
        _capped(self.solution, MAX_FILES_BYTES, "solution")
        return self


def _refuse(field: str, message: str) -> PydanticCustomError:
    return PydanticCustomError("image_task", message, {"field": field})


def image_task_rules(
    *,
    environment: TaskEnvironment | None,
    workspace: object,
    entry_point: str | None,
    protected: list[str],
    suites: list[tuple[str, object]],
    verifier: VerifierSuite | None,
    hidden: bool,
) -> None:
    """An image task is solved in its own container and graded by its verifier alone; ``hidden``: the full
    task (with its hidden part), not a public view."""
    if environment is None:
        raise _refuse("hidden_tests.kind", "a verifier grades an image task: set environment (the task's image)")
    if workspace is not None:
        raise _refuse("workspace", "an image task's files are in its image (environment), not a workspace")
    if entry_point is not None:
        raise _refuse("entry_point", "an image task is graded by its verifier, not by calling a function")
    if protected:
        raise _refuse("protected", "the verifier runs in a fresh container: nothing of the episode's is reset")
    for name, _suite in suites:
        raise _refuse(f"{name}.kind", "an image task is graded by its verifier alone (hidden_tests kind verifier)")
    if hidden and verifier is None:
        raise _refuse("hidden_tests.kind", "an image task's hidden_tests is its verifier (kind verifier)")

"""Sandbox fixtures: one long-lived instance per backend, plus leftover audits after every test.

Hostile programs only ever run inside the backend under test. A backend that cannot start makes its tests
skip with what to start (dockerd), except under CI (``CI=true``) where that is a failure.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from schemas.errors import RewardstreamError
from schemas.settings import Settings
from schemas.tasks import Task
from workers.containers.validation import TaskValidation
from workers.containers.verification import Verification
from workers.overlays.host import OverlayHost, image_rootfs_dir
from workers.overlays.rootfs import RootfsCache
from workers.sandbox.api import Sandbox, SandboxResult, SandboxSpec
from workers.sandbox.factory import make_sandbox

if TYPE_CHECKING:
    from tests.sandbox.episode_grading_env import Roles

#: ``process`` forks runs from the pre-started sandbox interpreter; ``process_inline`` is the same, with
#: ``python3 main.py`` programs run the way the grader's harness runs (``python3 -I -S -B -c``: in-process in
#: the forked interpreter, no exec at all). Every hostile test runs on both and on docker.
BACKENDS = ("process", "process_inline", "docker")
INLINE_BOOT = "import runpy\nrunpy.run_path('main.py', run_name='__main__')\n"


class InlinePython:
    """Runs ``python3 main.py ARGS`` specs as ``python3 -I -S -B -c BOOT ARGS`` (the fork server's fast path)."""

    name = "process"

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def run(self, spec: SandboxSpec) -> SandboxResult:
        if spec.argv[:2] == ("python3", "main.py"):
            spec = replace(spec, argv=("python3", "-I", "-S", "-B", "-c", INLINE_BOOT, *spec.argv[2:]))
        return self.inner.run(spec)  # type: ignore[no-any-return]

    def audit(self, wait_s: float = 0.0) -> list[str]:
        return list(self.inner.audit(wait_s))

    def close(self) -> None:
        """The wrapped session fixture closes the backend."""


def _unavailable(what: str, exc: Exception) -> None:
    message = f"{what} unavailable ({exc}); start it (e.g. `rewardstream up` for dockerd) to run these tests"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def sandbox_settings() -> Settings:
    return Settings()


@pytest.fixture(scope="session")
def process_sandbox(sandbox_settings: Settings) -> Iterator[Sandbox]:
    from infra.local.sandbox_image import ensure_toolchain_rootfs

    # Another toolchain family (the language tests) is built the first time a run names it, as the CLI does;
    # `make test` builds them all before the tests (`rewardstream sandbox toolchains --build all --docker`).
    families = functools.partial(ensure_toolchain_rootfs, sandbox_settings)
    try:
        sandbox = make_sandbox(sandbox_settings, "process", toolchain_rootfs=families)
    except RewardstreamError as exc:
        _unavailable("process sandbox", exc)
    try:
        yield sandbox
    finally:
        sandbox.close()


@pytest.fixture(scope="session")
def process_inline_sandbox(process_sandbox: Sandbox) -> Sandbox:
    return InlinePython(process_sandbox)


@pytest.fixture(scope="session")
def docker_sandbox(sandbox_settings: Settings) -> Iterator[Sandbox]:
    from infra.local.sandbox_image import ensure_toolchain_image

    try:
        from workers.sandbox.docker_backend import docker_client

        families = functools.partial(ensure_toolchain_image, sandbox_settings, docker_client(sandbox_settings))
        sandbox = make_sandbox(sandbox_settings, "docker", toolchain_image=families)
    except (RewardstreamError, ImportError) as exc:
        _unavailable("docker sandbox", exc)
    try:
        yield sandbox
    finally:
        sandbox.close()


@pytest.fixture(params=BACKENDS)
def sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """Each test using this runs once per backend; afterwards nothing of the run may remain."""
    backend: Sandbox = request.getfixturevalue(f"{request.param}_sandbox")
    yield backend
    leftovers = audit(backend)
    assert not leftovers, f"{request.param} left behind: {leftovers}"


def audit(backend: Any) -> list[str]:
    """What a finished run left behind, per the backend's own audit (no processes, cgroups, mounts...)."""
    return list(backend.audit(wait_s=10.0))


def run_py(sandbox: Sandbox, code: str, **limits: Any) -> SandboxResult:
    """Run python source as /work/main.py with the given SandboxSpec overrides."""
    files = {"main.py": code.encode(), **limits.pop("files", {})}
    spec = SandboxSpec(argv=("python3", "main.py"), files=files, **limits)
    return sandbox.run(spec)


@pytest.fixture(scope="module")
def overlays(settings: Settings, docker_client: Any) -> Iterator[OverlayHost]:
    """The process backend's host for image tasks (its unpacked trees pruned with the module's images)."""
    host = OverlayHost(settings, docker_client)
    try:
        yield host
    finally:
        host.close()


@pytest.fixture(scope="module")
def task_images(settings: Settings, docker_client: Any) -> Iterator[dict[str, str]]:
    """task id -> image: each test's task image, removed after the module (and its unpacked tree, if any)."""
    made: dict[str, str] = {}
    yield made
    for tag in set(made.values()):
        docker_client.images.remove(tag, force=True, noprune=True)  # a parent layer may be in a build
    if made:
        RootfsCache(image_rootfs_dir(settings)).prune(docker_client)


@pytest.fixture(params=["docker", "process"])
def verifying(request: pytest.FixtureRequest, docker_client: Any) -> Callable[..., Verification]:
    """``verifying(image, environment, verifier, workdir_tar)`` on one backend: a container, or an overlay."""
    from workers.containers.verification import verify
    from workers.overlays.overlay_verification import verify_on_overlay

    if request.param == "docker":
        return functools.partial(verify, docker_client)
    return functools.partial(verify_on_overlay, request.getfixturevalue("overlays"))


@pytest.fixture(params=["docker", "process"])
def validating(request: pytest.FixtureRequest, docker_client: Any) -> Callable[[str, Task], TaskValidation]:
    """``validating(image, task)`` on one backend (containers, or overlays), each result checked to say so."""
    from workers.containers.validation import validate_task

    overlays = None if request.param == "docker" else request.getfixturevalue("overlays")

    def validate(image: str, task: Task) -> TaskValidation:
        result = validate_task(docker_client, image, task, overlays)
        assert result.backend == request.param
        return result

    return validate


@pytest.fixture
def image_of(settings: Settings, docker_client: Any, task_images: dict[str, str]) -> Any:
    """``image_of(task)``: the task's image on this host (built once; removed after the module)."""
    from rewardstream.cli.task_images import task_image_source

    source = task_image_source(settings, docker_client)

    def build(task: Task) -> str:
        task_images[task.task_id] = source(task)
        return task_images[task.task_id]

    return build


@pytest.fixture
def roles(
    request: pytest.FixtureRequest, process_sandbox: Sandbox, minio_client: Any, s3_bucket: str, tmp_path: Path
) -> Roles:
    """The roles over the task, its cases limited to the test's ``roles`` parameter if it gives one."""
    from tests.sandbox.episode_grading_env import Roles
    from tests.sandbox.swe_task import task
    from workers.artifacts import ArtifactStore
    from workers.grading import Grader
    from workers.judge.cache import CachedJudge
    from workers.judge.rubric import RubricJudge
    from workers.roles.common import RoleContext, TaskSource
    from workers.roles.executor import ExecutorHandler
    from workers.roles.judging import JudgeHandler
    from workers.roles.verifier import VerifierHandler
    from workers.tasks.registry import TaskRegistry

    store = ArtifactStore(minio_client, s3_bucket)
    limit = {"timeout_s": request.param} if getattr(request, "param", None) else {}
    tasks = {t.task_id: t for t in (task("call", **limit), task("io", **limit))}
    registry = TaskRegistry(tmp_path / "tasks")
    registry.store(tasks.values())

    def context(role: str) -> RoleContext:
        return RoleContext(role=role, worker="test:1", tasks=TaskSource(registry), artifacts=store, output_topic="o")

    grader = Grader(process_sandbox)
    return Roles(
        store,
        VerifierHandler(context("verifier"), grader),
        ExecutorHandler(context("executor"), grader),
        JudgeHandler(context("judge"), CachedJudge(RubricJudge())),
        tasks,
    )

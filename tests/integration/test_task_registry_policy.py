"""The S3 registry's bucket policy, applied on a real MinIO (built from the Go module proxy: the platform's
s3proxy has one identity and no policies): the loader writes, a worker reads the public part and gets
AccessDenied on the hidden one, a verifier reads both. The policies applied are the ones ``rewardstream tasks
policy`` prints; the users, policies and bucket the test creates are removed, and the server stopped by pid."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from schemas.settings import Settings
from tests.unit.workers.tasks.test_registry import task

#: The MinIO binary is built before the tests by ``make test``; run alone on a cold machine, the fixture builds
#: it first (minutes of ``go install``), within this module's own time limit.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(3_600)]

CLI = str(Path(sys.executable).with_name("rewardstream"))


def as_principal(settings: Settings, endpoint: str, access_key: str, secret_key: str, cache: Path) -> Settings:
    from pydantic import SecretStr

    secret = SecretStr(secret_key)
    s3 = settings.s3.model_copy(update={"endpoint": endpoint, "access_key": access_key, "secret_key": secret})
    local = settings.local.model_copy(update={"cache_dir": cache})
    return settings.model_copy(update={"s3": s3, "local": local})


def test_workers_cannot_read_hidden_tests_and_verifiers_can(minio: Any, settings: Settings, tmp_path: Path) -> None:
    from minio import Minio
    from minio.credentials.providers import StaticProvider
    from minio.minioadmin import MinioAdmin

    from schemas.registry_s3 import RegistryLocation
    from schemas.tasks import Task
    from workers.artifacts import remove_bucket
    from workers.tasks.registry import TaskVersionNotFoundError
    from workers.tasks.s3_access import RegistryAccessDeniedError, RegistryAccessError
    from workers.tasks.s3_registry import S3TaskRegistry

    tag = uuid.uuid4().hex[:8]
    bucket = f"rs-tasks-{tag}"
    url = f"s3://{bucket}/reg"
    argv = [CLI, "tasks", "policy", "--registry", url]
    printed = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert printed.returncode == 0, printed.stderr
    policies: dict[str, dict[str, Any]] = json.loads(printed.stdout)
    assert set(policies) == {"loader", "worker", "verifier"}

    root = Minio(minio.endpoint, access_key=minio.root_user, secret_key=minio.root_password, secure=False)
    admin = MinioAdmin(
        endpoint=minio.endpoint, credentials=StaticProvider(minio.root_user, minio.root_password), secure=False
    )
    root.make_bucket(bucket)
    users: dict[str, tuple[str, str]] = {}
    added: list[str] = []
    try:
        for principal, document in policies.items():
            name, secret = f"rs-{principal}-{tag}", secrets.token_hex(16)
            admin.policy_add(f"rs-tasks-{principal}-{tag}", policy=document)
            added.append(f"rs-tasks-{principal}-{tag}")
            admin.user_add(name, secret)
            users[principal] = (name, secret)
            admin.attach_policy([f"rs-tasks-{principal}-{tag}"], user=name)

        def registry(principal: str) -> S3TaskRegistry:
            name, secret = users[principal]
            mine = as_principal(settings, minio.endpoint, name, secret, tmp_path / principal)
            return S3TaskRegistry.open(url, mine)

        loader, worker, verifier = registry("loader"), registry("worker"), registry("verifier")
        stored = loader.store([Task.model_validate(task(f"demo/{i}")) for i in range(3)])
        assert stored.added == ("demo/0", "demo/1", "demo/2")
        version = stored.versions["demo/1"]

        # A worker: the public part, the latest pointer and the listing, nothing of the hidden part.
        assert worker.ids() == ["demo/0", "demo/1", "demo/2"]
        assert worker.latest_version("demo/1") == version
        assert worker.public("demo/1").task_version == version
        hidden_key = RegistryLocation.parse(url).version_key("demo/1", version, hidden=True)
        with pytest.raises(RegistryAccessDeniedError) as denied:
            worker.task("demo/1")
        assert str(denied.value) == f"access denied: these S3 credentials may not read s3://{bucket}/{hidden_key}"
        assert not (tmp_path / "worker" / "task-cache" / "hidden").exists()
        with pytest.raises(RegistryAccessError, match="access denied"):
            worker.store([Task.model_validate(task("demo/9"))])
        with pytest.raises(RegistryAccessDeniedError):  # the raw request, too: AccessDenied from MinIO itself
            worker.access.get(hidden_key, 1_000_000)

        # A verifier: both parts, by version, checked against the digest.
        full = verifier.task("demo/1", version)
        assert full.hidden_tests.model_dump()["cases"][0]["args"] == [20, 22]
        assert verifier.public("demo/1").task_version == version
        with pytest.raises(RegistryAccessError, match="access denied"):
            verifier.store([Task.model_validate(task("demo/9"))])
        with pytest.raises(TaskVersionNotFoundError):
            verifier.task("demo/1", "f" * 64)

        # Credentials MinIO does not know: one line naming what to check.
        stranger = S3TaskRegistry.open(
            url, as_principal(settings, minio.endpoint, "nobody", "not-a-secret", tmp_path / "x")
        )
        with pytest.raises(RegistryAccessError, match=r"rejected the credentials \(InvalidAccessKeyId\)"):
            stranger.latest_version("demo/1")
    finally:
        for principal, (name, _secret) in users.items():
            admin.detach_policy([f"rs-tasks-{principal}-{tag}"], user=name)
            admin.user_remove(name)
        for name in added:
            admin.policy_remove(name)
        remove_bucket(root, bucket)
    assert not any(f"-{tag}" in name for name in json.loads(admin.user_list()))
    assert not any(f"-{tag}" in name for name in json.loads(admin.policy_list()))
    assert not root.bucket_exists(bucket)

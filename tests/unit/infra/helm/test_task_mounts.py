"""The task registry on a node directory (``tasks.hostPath``): only the roles that grade with hidden tests mount it
whole; every other role mounts its ``public/`` part alone, so a pod that runs as root (the process backend's) holds
no hidden test to read. Real helm renders."""

from __future__ import annotations

from typing import Any

import pytest

from infra.helm import check
from infra.helm.sources import ensure_helm
from infra.helm.validate import load_manifests

pytestmark = pytest.mark.timeout(1800)  # a cold machine builds helm first
TASKS_DIR = "/var/lib/rewardstream/tasks"
#: Every role with its Deployment's name; the auditor needs a Docker Engine (it re-grades on the other backend).
EVERY_ROLE = ("--set", "credentials.gatewayTokens=t", "--set", "roles.auditor.enabled=true",
              "--set", "sandbox.dockerHost=unix:///var/run/docker.sock")  # fmt: skip
HIDDEN_READERS = {"rs-rewardstream-verifier", "rs-rewardstream-auditor"}


def _task_mounts(*args: str) -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """Deployment name -> (its container's mounts of the tasks volume, the pod's tasks volumes)."""
    manifests = load_manifests(check.render(ensure_helm(), check.CHART, [*EVERY_ROLE, *args]))
    found = {}
    for m in manifests:
        if m["kind"] != "Deployment":
            continue
        pod = m["spec"]["template"]["spec"]
        mounts = [v for v in pod["containers"][0].get("volumeMounts", []) if v["name"] == "tasks"]
        volumes = [v for v in pod.get("volumes", []) if v["name"] == "tasks"]
        found[m["metadata"]["name"]] = (mounts, volumes)
    return found


def test_only_the_hidden_readers_mount_the_whole_registry_and_the_others_its_public_part() -> None:
    found = _task_mounts("--set-string", "tasks.hostPath=/srv/tasks")
    assert set(found) >= HIDDEN_READERS
    assert len(found) == 8
    for name, (mounts, volumes) in found.items():
        assert volumes == [{"name": "tasks", "hostPath": {"path": "/srv/tasks", "type": "Directory"}}], name
        if name in HIDDEN_READERS:
            assert mounts == [{"name": "tasks", "mountPath": TASKS_DIR, "readOnly": True}], name
        else:
            public = {"name": "tasks", "mountPath": f"{TASKS_DIR}/public", "subPath": "public", "readOnly": True}
            assert mounts == [public], name


def test_a_registry_in_s3_mounts_nothing() -> None:
    own = [
        f"credentials.s3Principals.{role}.{key}=x"
        for role in ("verifier", "auditor")
        for key in ("accessKey", "secretKey")
    ]
    found = _task_mounts("--set", "tasks.registry=s3://tasks/rl", *(a for s in own for a in ("--set", s)))
    assert found
    assert all(mounts == [] and volumes == [] for mounts, volumes in found.values())

"""The chart installed on the local cluster: ``ci/local-e2e-values.yaml`` (host networking, loopback services,
fast KEDA) plus what only this run knows (its topic prefix, its task registry, the S3 credentials of the local
platform, a slot-lock dir inside the cluster dir so that ``down`` leaves no trace of it on the host).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from infra.helm.sources import ensure_helm
from schemas.caps import STDERR_TAIL_BYTES
from schemas.errors import PlatformError

CHART = Path(__file__).resolve().parents[1] / "helm" / "rewardstream"
VALUES = CHART / "ci" / "local-e2e-values.yaml"
RELEASE = "rs"
NAMESPACE = "rewardstream"
_HELM_TIMEOUT_S = 300.0


def reward_app_id(release: str = RELEASE) -> str:
    """The reward processor's app id the chart gives ``release`` when no ``roles.rewardProcessor.appId`` is set
    (``_helpers.tpl``, ``rs.rewardApp``): the name of its consumer group and of its changelog's prefix."""
    return f"{release}-rewards"


@dataclass(frozen=True, slots=True)
class Install:
    """What this run sets on top of the e2e values file."""

    topic_prefix: str
    partitions: int
    tasks_dir: Path
    slots_dir: Path
    s3_access_key: str
    s3_secret_key: str
    image_tag: str

    def overrides(self) -> dict[str, str]:
        return {
            "kafka.topicPrefix": self.topic_prefix,
            "kafka.partitions": str(self.partitions),
            "tasks.hostPath": str(self.tasks_dir),
            "sandbox.slotsHostPath": str(self.slots_dir),
            "credentials.s3AccessKey": self.s3_access_key,
            "credentials.s3SecretKey": self.s3_secret_key,
            "image.tag": self.image_tag,
        }


def install_argv(helm: Path, kubeconfig: Path, install: Install) -> list[str]:
    """``helm install``; values go through ``--set-string`` (a secret or a prefix is never parsed as YAML),
    except the partition count, which the schema wants as an integer."""
    argv = [str(helm), "install", RELEASE, str(CHART), f"--kubeconfig={kubeconfig}", f"--namespace={NAMESPACE}",
            "--create-namespace", f"--values={VALUES}"]  # fmt: skip
    for key, value in sorted(install.overrides().items()):
        flag = "--set" if key == "kafka.partitions" else "--set-string"
        argv += [flag, f"{key}={value}"]
    return argv


def _run(argv: list[str], what: str, secrets: Mapping[str, str] | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=_HELM_TIMEOUT_S)
    if proc.returncode != 0:
        detail = proc.stderr.strip()[-STDERR_TAIL_BYTES:]
        for secret in (secrets or {}).values():
            detail = detail.replace(secret, "***")
        raise PlatformError(f"{what} failed: {detail}")
    return proc.stdout


def install_chart(kubeconfig: Path, install: Install) -> None:
    _run(install_argv(ensure_helm(), kubeconfig, install), "helm install", {"s3": install.s3_secret_key})


def uninstall_chart(kubeconfig: Path) -> None:
    """Uninstall and wait until its pods are gone (each drains within its grace period)."""
    argv = [str(ensure_helm()), "uninstall", RELEASE, f"--kubeconfig={kubeconfig}", f"--namespace={NAMESPACE}",
            "--wait", "--timeout=120s"]  # fmt: skip
    _run(argv, "helm uninstall")

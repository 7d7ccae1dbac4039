"""The e2e's helm command: the e2e values file, then the run's own settings, strings kept strings; the reward
app id it cleans up after is the one the chart gives its release."""

from __future__ import annotations

import subprocess
from pathlib import Path

from infra.helm.sources import KUBERNETES_VERSION, ensure_helm
from infra.helm.validate import load_manifests
from infra.k8s.e2e_chart import CHART, NAMESPACE, RELEASE, VALUES, Install, install_argv, reward_app_id


def _install() -> Install:
    return Install("rs-e2e-1.", 6, Path("/reg"), Path("/c/slots"), "ak", "007", "0.1.0")


def test_install_uses_the_e2e_values_and_the_runs_settings() -> None:
    argv = install_argv(Path("/bin/helm"), Path("/k/admin.kubeconfig"), _install())
    assert argv[:4] == ["/bin/helm", "install", RELEASE, str(CHART)]
    assert f"--values={VALUES}" in argv
    assert VALUES.exists()
    assert f"--namespace={NAMESPACE}" in argv
    assert argv[argv.index("--set") + 1] == "kafka.partitions=6"  # an integer for the schema
    strings = [argv[i + 1] for i, a in enumerate(argv) if a == "--set-string"]
    assert "credentials.s3SecretKey=007" in strings  # never read as the number 7
    assert "kafka.topicPrefix=rs-e2e-1." in strings
    assert "tasks.hostPath=/reg" in strings
    assert "sandbox.slotsHostPath=/c/slots" in strings
    assert "image.tag=0.1.0" in strings


def test_the_runs_reward_app_is_the_one_the_chart_gives_its_release() -> None:
    """The e2e deletes the reward processor's group and changelog by this name: it must be the release's."""
    argv = [str(ensure_helm()), "template", RELEASE, str(CHART), f"--values={VALUES}", f"--namespace={NAMESPACE}",
            f"--kube-version={KUBERNETES_VERSION}"]  # fmt: skip
    rendered = load_manifests(subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout)
    processor = next(m for m in rendered if m["kind"] == "Deployment" and m["metadata"]["name"].endswith("processor"))
    args = processor["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--app-id") + 1] == reward_app_id() == f"{RELEASE}-rewards"
    scaled = next(m for m in rendered if m["kind"] == "ScaledObject" and m["metadata"]["name"].endswith("processor"))
    assert {t["metadata"]["consumerGroup"] for t in scaled["spec"]["triggers"]} == {reward_app_id()}

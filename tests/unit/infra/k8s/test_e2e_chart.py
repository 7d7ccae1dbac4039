"""The e2e's helm command: the e2e values file, then the run's own settings, strings kept strings."""

from __future__ import annotations

from pathlib import Path

from infra.k8s.e2e_chart import CHART, NAMESPACE, RELEASE, VALUES, Install, install_argv


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

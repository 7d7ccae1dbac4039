"""The rewardstream container image (``make image``): built from Debian packages and the wheel, nothing pulled;
its CLI answers, and a real process-sandbox run works inside it with no network, under the privileges the
chart's sandboxed roles get (``infra/helm/rewardstream/README.md``). One build, python family only (the other
families are the same trees appended; ``make image`` bakes them all)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from infra.image.build import BuiltImage, build_image, save_image
from schemas.settings import Settings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
ROOT = Path(__file__).resolve().parents[2]
TAG = "test-image"
#: What the chart's sandboxed roles run with (values.yaml ``sandbox``), as docker flags: root, exactly these
#: capabilities, no seccomp profile of the runtime's, the cgroupfs writable, a read-only root, no-new-privileges.
CAPABILITIES: list[str] = yaml.safe_load((ROOT / "infra/helm/rewardstream/values.yaml").read_text())["sandbox"][
    "capabilities"
]
SANDBOX_FLAGS = (
    "--user", "0", "--cap-drop", "ALL", *(f"--cap-add={cap}" for cap in CAPABILITIES),
    "--security-opt", "seccomp=unconfined", "--security-opt", "no-new-privileges",
    "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--read-only",
    "--tmpfs", "/tmp", "--tmpfs", "/run/rewardstream-sandbox", "--tmpfs", "/var/cache/rewardstream",
)  # fmt: skip


def _docker(*args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False, timeout=timeout_s)


@pytest.fixture(scope="module")
def image() -> Iterator[BuiltImage]:
    if shutil.which("docker") is None or shutil.which("mmdebstrap") is None:
        pytest.fail("docker and mmdebstrap are needed: `rewardstream up` installs and starts them")
    built = build_image(Settings(), ROOT, families=("python",), tag=TAG, python=sys.executable)
    try:
        yield built
    finally:
        _docker("image", "rm", "--force", built.tag)


def test_cli_answers_inside(image: BuiltImage) -> None:
    proc = _docker("run", "--rm", "--network", "none", image.tag, "--help")
    assert proc.returncode == 0, proc.stderr
    assert {"worker", "reward", "serve"} <= set(proc.stdout.split()), proc.stdout


def test_process_sandbox_run_inside(image: BuiltImage, tmp_path: Path) -> None:
    program = tmp_path / "prog.py"
    program.write_text(
        "import os, socket\nprint(sum(range(10)), os.getuid())\nsocket.create_connection(('1.1.1.1', 53), 1)\n"
    )
    proc = _docker(
        "run", "--rm", "--network", "none", *SANDBOX_FLAGS, "-v", f"{tmp_path}:/in:ro", image.tag,
        "sandbox", "run", "/in/prog.py", "--backend", "process", "--timeout", "10",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    # The program ran as the sandbox's uid, and had no network of its own: its connect failed.
    assert result["stdout"].split() == ["45", str(Settings().sandbox.uid)], result
    assert result["status"] == "nonzero_exit", result
    assert "OSError" in result["stderr"] or "unreachable" in result["stderr"], result


def test_unprivileged_container_is_a_sandbox_error_not_a_crash(image: BuiltImage, tmp_path: Path) -> None:
    """Without the privileges, the run is the infrastructure's failure (``sandbox_error``), named."""
    program = tmp_path / "prog.py"
    program.write_text("print(1)\n")
    proc = _docker(
        "run", "--rm", "--network", "none", "-v", f"{tmp_path}:/in:ro", image.tag,
        "sandbox", "run", "/in/prog.py", "--backend", "process", "--timeout", "10",
    )  # fmt: skip
    assert proc.returncode != 0 or json.loads(proc.stdout)["status"] == "sandbox_error", proc.stdout


def test_saved_tarball_is_an_image_archive(image: BuiltImage, tmp_path: Path) -> None:
    """What ``ctr -n k8s.io images import`` takes: a docker-save archive with the tag in its manifest."""
    saved = save_image(image.tag, tmp_path / "image.tar")
    listing = subprocess.run(["tar", "-xOf", str(saved), "manifest.json"], capture_output=True, text=True, check=True)
    assert json.loads(listing.stdout)[0]["RepoTags"] == [image.tag]

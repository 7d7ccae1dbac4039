"""Where the local cluster keeps its build cache, binaries, certificates, data, logs and pid files.

Everything lives under ``<RS_CACHE_DIR>/k8s`` (default ``~/.cache/rewardstream/k8s``), outside the repo: the
binaries are keyed on their version and the Go version that built them, so a warm cache is reused as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.k8s.versions import K8S_VERSION, KEDA_VERSION


@dataclass(frozen=True)
class K8sPaths:
    """The layout of ``root`` (the cache dir's ``k8s`` part)."""

    root: Path
    go_version: str

    @property
    def src(self) -> Path:
        """Wrapper Go modules (go.mod with the pinning ``replace`` blocks)."""
        return self.root / "src"

    @property
    def k8s_bin(self) -> Path:
        return self.root / "bin" / f"k8s-{K8S_VERSION}-{self.go_version}"

    @property
    def keda_bin(self) -> Path:
        return self.root / "bin" / f"keda-{KEDA_VERSION}-{self.go_version}"

    @property
    def build_logs(self) -> Path:
        return self.root / "build-logs"

    @property
    def cluster(self) -> Path:
        """The running cluster's scratch dir: removed by ``down``, recreated by ``up``."""
        return self.root / "cluster"

    @property
    def pki(self) -> Path:
        return self.cluster / "pki"

    @property
    def logs(self) -> Path:
        return self.cluster / "logs"

    @property
    def run(self) -> Path:
        """Pid files and the host snapshot ``down`` restores from."""
        return self.cluster / "run"

    @property
    def containerd(self) -> Path:
        return self.cluster / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd / "containerd.sock"

    @property
    def kubelet(self) -> Path:
        return self.cluster / "kubelet"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.pki / "admin.kubeconfig"

    @property
    def host_snapshot(self) -> Path:
        return self.root / "host-before.json"

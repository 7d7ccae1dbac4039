"""Pinned versions and the loopback ports of the local cluster, in one place."""

from __future__ import annotations

from dataclasses import dataclass

K8S_VERSION = "v1.37.2"
K8S_STAGING_VERSION = "v0.37.2"
KEDA_VERSION = "v2.21.0"

K8S_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet")
KEDA_COMMANDS = ("operator", "adapter")

#: The staging modules ``k8s.io/kubernetes`` replaces with its own ``./staging`` copies; as a library each must
#: be pinned to the matching published version (the ``replace`` block of its go.mod, rewritten).
K8S_STAGING_MODULES = (
    "api", "apiextensions-apiserver", "apimachinery", "apiserver", "cli-runtime", "client-go", "cloud-provider",
    "cluster-bootstrap", "code-generator", "component-base", "component-helpers", "controller-manager", "cri-api",
    "cri-client", "cri-streaming", "csi-translation-lib", "dynamic-resource-allocation", "endpointslice",
    "externaljwt", "kms", "kube-aggregator", "kube-controller-manager", "kube-proxy", "kube-scheduler", "kubectl",
    "kubelet", "metrics", "mount-utils", "pod-security-admission", "sample-apiserver", "streaming",
)  # fmt: skip

#: KEDA's own go.mod carries one replace and one exclude; a wrapper module must repeat them (``go install``
#: refuses a module with replace directives).
_NEXUS = "github.com/nexus-rpc/nexus-proto-annotations"
KEDA_GO_MOD_EXTRA = f"""
replace {_NEXUS} v0.1.0 => {_NEXUS} v0.1.1-0.20260629224316-835bd8d49cb4

exclude github.com/go-chi/chi/v5 v5.2.3
"""

#: Debian packages the node needs (command -> package); containerd and runc come with docker.io.
NODE_PACKAGES = {
    "etcd": "etcd-server",
    "containerd": "containerd",
    "runc": "runc",
    "ctr": "containerd",
    "busybox": "busybox-static",
    "iptables": "iptables",
    "nft": "nftables",
    "openssl": "openssl",
    "kubectl": "kubectl",
}
CNI_PLUGIN_DIR = "/usr/lib/cni"
CNI_PACKAGE = "containernetworking-plugins"


@dataclass(frozen=True)
class ClusterPorts:
    """Loopback ports, chosen away from the platform's (Kafka 9092/9093, S3 9000, OpenSearch 9200/9300, the
    gateway 8080, metrics 9464-9469)."""

    etcd_client: int = 23790
    etcd_peer: int = 23800
    etcd_metrics: int = 23810
    apiserver: int = 16443
    controller_manager: int = 10257
    scheduler: int = 10259
    kubelet: int = 10250
    kubelet_healthz: int = 10248
    keda_adapter: int = 16444
    keda_operator_metrics: int = 18080
    keda_operator_health: int = 18081
    keda_adapter_http: int = 18082
    keda_grpc: int = 19666

    def claims(self) -> dict[str, int]:
        """Every port, by what listens there (checked free before anything starts)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

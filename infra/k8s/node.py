"""The one node: a private containerd (its own socket, root, state and runc root; docker's is never touched),
its CNI config, and the kubelet's configuration and command line.

Pods use host networking, so the CNI bridge is configured (the CRI reports the node's network ready only with a
CNI config) but never set up. Two settings exist only because of this kind of host: root lacks
CAP_SYS_RESOURCE (``restrict_oom_score_adj``: a sandbox's oom_score_adj of -998 would be refused) and cgroup v1
(``failCgroupV1: false``).
"""

from __future__ import annotations

import json
from pathlib import Path

from infra.k8s.images import BUSYBOX_IMAGE
from infra.k8s.layout import K8sPaths
from infra.k8s.versions import CNI_PLUGIN_DIR, ClusterPorts

PAUSE_IMAGE = BUSYBOX_IMAGE
"""The pod sandbox image: busybox sleeping (nothing is pulled, so no registry.k8s.io/pause)."""
CNI_BRIDGE = "rsk8s0"
CNI_SUBNET = "10.244.0.0/24"


def containerd_config(paths: K8sPaths) -> str:
    """containerd 1.6 config (v2 format); every path is under the cluster dir."""
    root = paths.containerd
    return f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{paths.containerd_socket}"
[ttrpc]
  address = "{root / "containerd-ttrpc.sock"}"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{root / "runc"}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_PLUGIN_DIR}"
    conf_dir = "{root / "cni"}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"
"""


def cni_config() -> str:
    return json.dumps(
        {
            "cniVersion": "0.4.0",
            "name": "rs-k8s",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": CNI_BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "ipam": {"type": "host-local", "ranges": [[{"subnet": CNI_SUBNET}]]},
                },
                {"type": "loopback"},
            ],
        },
        indent=2,
    )


def write_containerd_files(paths: K8sPaths) -> Path:
    """Write containerd's config and the CNI config; return the config's path."""
    (paths.containerd / "cni").mkdir(parents=True, exist_ok=True)
    (paths.containerd / "cni" / "10-rs-k8s.conflist").write_text(cni_config())
    config = paths.containerd / "config.toml"
    config.write_text(containerd_config(paths))
    return config


def kubelet_config(paths: K8sPaths, ports: ClusterPorts) -> str:
    """KubeletConfiguration: loopback only, webhook authn/authz, cgroupfs, no eviction on a shared disk."""
    return json.dumps(
        {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": ports.kubelet,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": ports.kubelet_healthz,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(paths.pki / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs",
            "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
            "failSwapOn": False,
            "failCgroupV1": False,
            "protectKernelDefaults": False,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "maxPods": 30,
            "podLogsDir": str(paths.cluster / "pod-logs"),
            "serializeImagePulls": False,
            "nodeStatusReportFrequency": "10s",
        },
        indent=2,
    )


def kubelet_argv(paths: K8sPaths, binary: Path, ports: ClusterPorts) -> list[str]:
    config = paths.kubelet / "config.json"
    paths.kubelet.mkdir(parents=True, exist_ok=True)
    config.write_text(kubelet_config(paths, ports))
    return [
        str(binary),
        f"--config={config}",
        f"--kubeconfig={paths.pki / 'node.kubeconfig'}",
        f"--root-dir={paths.kubelet / 'root'}",
        f"--cert-dir={paths.kubelet / 'pki'}",
        "--v=1",
    ]

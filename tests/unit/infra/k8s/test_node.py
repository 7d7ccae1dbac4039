"""The node's configs keep everything private and work on this kind of host (cgroup v1, no CAP_SYS_RESOURCE)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from infra.k8s.layout import K8sPaths
from infra.k8s.node import PAUSE_IMAGE, cni_config, containerd_config, kubelet_config
from infra.k8s.versions import ClusterPorts


def test_containerd_uses_only_its_own_paths(tmp_path: Path) -> None:
    paths = K8sPaths(tmp_path, "go1.26.8")
    config = tomllib.loads(containerd_config(paths))
    assert config["grpc"]["address"] == str(paths.containerd_socket)
    for path in (config["root"], config["state"], config["ttrpc"]["address"]):
        assert path.startswith(str(paths.cluster) + "/")
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True  # root has no CAP_SYS_RESOURCE here
    assert cri["sandbox_image"] == PAUSE_IMAGE
    assert cri["stream_server_address"] == "127.0.0.1"
    runc = cri["containerd"]["runtimes"]["runc"]["options"]
    assert runc["Root"].startswith(str(paths.cluster) + "/")  # not docker's /run/containerd/runc


def test_kubelet_binds_loopback_and_tolerates_cgroup_v1(tmp_path: Path) -> None:
    paths = K8sPaths(tmp_path, "go1.26.8")
    config = json.loads(kubelet_config(paths, ClusterPorts()))
    assert config["address"] == "127.0.0.1"
    assert config["healthzBindAddress"] == "127.0.0.1"
    assert config["readOnlyPort"] == 0
    assert config["failCgroupV1"] is False
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["containerRuntimeEndpoint"] == f"unix://{paths.containerd_socket}"


def test_cni_bridge_masquerades_nothing() -> None:
    bridge = json.loads(cni_config())["plugins"][0]
    assert bridge["type"] == "bridge"
    assert bridge["ipMasq"] is False

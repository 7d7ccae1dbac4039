"""Command lines of etcd and the control plane: everything binds 127.0.0.1 on the ports of ``ClusterPorts``.

The apiserver advertises 127.0.0.1, which cannot go into the ``kubernetes`` Endpoints object (hence
``--endpoint-reconciler-type=none``: nothing here needs that Service), and reaches the kubelet by the node's
hostname, which resolves to loopback.
"""

from __future__ import annotations

from pathlib import Path

from infra.k8s.layout import K8sPaths
from infra.k8s.versions import ClusterPorts

SERVICE_CIDR = "10.96.0.0/16"
HPA_SYNC_SECONDS = 5
"""The HPA controller's period (15 s by default): scaling shows within seconds of KEDA's metric changing."""


def etcd_argv(paths: K8sPaths, ports: ClusterPorts) -> list[str]:
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    client = f"http://127.0.0.1:{ports.etcd_client}"
    return [
        "etcd", "--name=rs-k8s", f"--data-dir={paths.cluster / 'etcd'}",
        f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=rs-k8s={peer}", f"--listen-metrics-urls=http://127.0.0.1:{ports.etcd_metrics}",
        "--log-level=warn",
    ]  # fmt: skip


def apiserver_argv(paths: K8sPaths, binary: Path, ports: ClusterPorts) -> list[str]:
    pki = paths.pki
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1", f"--secure-port={ports.apiserver}", "--advertise-address=127.0.0.1",
        "--endpoint-reconciler-type=none", f"--cert-dir={pki / 'apiserver-run'}",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}", f"--token-auth-file={pki / 'tokens.csv'}",
        f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc", f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC", "--allow-privileged=true",
        f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'kubelet-client.key'}", "--kubelet-preferred-address-types=Hostname",
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client", "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group", "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        "--profiling=false", "--v=1",
    ]  # fmt: skip


def controller_manager_argv(paths: K8sPaths, binary: Path, ports: ClusterPorts) -> list[str]:
    kubeconfig = paths.pki / "controller-manager.kubeconfig"
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={ports.controller_manager}",
        f"--cert-dir={paths.pki / 'kcm-run'}", "--leader-elect=false",
        f"--service-account-private-key-file={paths.pki / 'sa.key'}", f"--root-ca-file={paths.pki / 'ca.crt'}",
        "--use-service-account-credentials=true", "--allocate-node-cidrs=false",
        f"--horizontal-pod-autoscaler-sync-period={HPA_SYNC_SECONDS}s", "--v=1",
    ]  # fmt: skip


def scheduler_argv(paths: K8sPaths, binary: Path, ports: ClusterPorts) -> list[str]:
    kubeconfig = paths.pki / "scheduler.kubeconfig"
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={ports.scheduler}", f"--cert-dir={paths.pki / 'sched-run'}",
        "--leader-elect=false", "--v=1",
    ]  # fmt: skip

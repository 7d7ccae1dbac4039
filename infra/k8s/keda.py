"""KEDA's operator and metrics adapter, run outside the cluster as processes, and the objects that plug its
metrics API into the apiserver.

Without kube-proxy a ClusterIP Service leads nowhere, so the APIService points at a Service of type
ExternalName (``localhost``): the aggregator resolves it to ``https://localhost:<adapter port>`` itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from infra.k8s.layout import K8sPaths
from infra.k8s.versions import ClusterPorts

NAMESPACE = "keda"
SERVICE = "keda-metrics-apiserver"


def keda_env(paths: K8sPaths) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(paths.cluster / "keda-home"),
        "KUBECONFIG": str(paths.pki / "keda.kubeconfig"),
        "WATCH_NAMESPACE": "",
        "POD_NAMESPACE": NAMESPACE,
        "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }


def operator_argv(binary: Path, paths: K8sPaths, ports: ClusterPorts) -> list[str]:
    certs = paths.pki / "keda"
    return [
        str(binary),
        f"--metrics-bind-address=127.0.0.1:{ports.keda_operator_metrics}",
        f"--health-probe-bind-address=127.0.0.1:{ports.keda_operator_health}",
        f"--metrics-service-bind-address=127.0.0.1:{ports.keda_grpc}",
        f"--cert-dir={certs}", f"--ca-dir={certs}",
        "--enable-cert-rotation=false", "--enable-webhook-patching=false", "--enable-apiservice-patching=false",
    ]  # fmt: skip


def adapter_argv(binary: Path, paths: K8sPaths, ports: ClusterPorts) -> list[str]:
    certs = paths.pki / "keda"
    kubeconfig = paths.pki / "keda.kubeconfig"
    return [
        str(binary),
        f"--lister-kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={ports.keda_adapter}", f"--port={ports.keda_adapter_http}",
        f"--tls-cert-file={certs / 'tls.crt'}", f"--tls-private-key-file={certs / 'tls.key'}", f"--cert-dir={certs}",
        f"--metrics-service-address=127.0.0.1:{ports.keda_grpc}",
    ]  # fmt: skip


def metrics_api_objects(ports: ClusterPorts) -> list[dict[str, Any]]:
    """The namespace, the ExternalName Service and the APIService of ``external.metrics.k8s.io``."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": NAMESPACE},
            "spec": {
                "type": "ExternalName",
                "externalName": "localhost",
                "ports": [{"name": "https", "port": ports.keda_adapter, "protocol": "TCP"}],
            },
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": "v1beta1.external.metrics.k8s.io"},
            "spec": {
                "group": "external.metrics.k8s.io",
                "version": "v1beta1",
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
                "insecureSkipTLSVerify": True,
                "service": {"name": SERVICE, "namespace": NAMESPACE, "port": ports.keda_adapter},
            },
        },
    ]

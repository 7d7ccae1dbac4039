"""The local cluster as a whole: ``up`` starts etcd, a private containerd, the control plane, one kubelet and
(optionally) KEDA, and waits until each is ready; ``down`` stops every one of them by pid and puts the host
back as it was (``host_state``).

Every process is started here, tracked by a pid file with its start time (``infra.local.process``), and stopped
by that pid; the containerd shims, which leave containerd's process group, are found by the private socket
they name and stopped by pid too.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.k8s import host_state, node, teardown
from infra.k8s.build import k8s_binaries, keda_binaries, keda_crd_dir, missing_binaries
from infra.k8s.control_plane import apiserver_argv, controller_manager_argv, etcd_argv, scheduler_argv
from infra.k8s.images import import_busybox
from infra.k8s.keda import adapter_argv, keda_env, metrics_api_objects, operator_argv
from infra.k8s.kubectl import Kubectl, wait_for
from infra.k8s.layout import K8sPaths
from infra.k8s.pki import make_pki
from infra.k8s.versions import CNI_PACKAGE, CNI_PLUGIN_DIR, NODE_PACKAGES, ClusterPorts
from infra.local.debian import ensure_commands
from infra.local.process import ManagedProcess
from infra.local.service import port_is_open, require_port_free
from schemas.errors import PlatformError

Report = Callable[[str], None]

#: Start order; ``down`` stops them in reverse (controllers before the pods they would recreate are deleted).
COMPONENTS = ("etcd", "containerd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
              "keda-operator", "keda-adapter")  # fmt: skip
READY_TIMEOUT_S = 180.0
"""Generous: on a loaded 2-core machine the apiserver alone took 7 s idle and much more under load."""


def node_name() -> str:
    """The node is named after the host, and the apiserver reaches the kubelet by that name: it must be loopback."""
    name = socket.gethostname().lower()
    try:
        address = socket.gethostbyname(name)
    except OSError as exc:
        raise PlatformError(
            f"the hostname {name!r} does not resolve ({exc}): map it to 127.0.0.1 in /etc/hosts"
        ) from exc
    if not address.startswith("127."):
        raise PlatformError(
            f"the hostname {name!r} resolves to {address}; the apiserver reaches the kubelet by hostname and all "
            "traffic must stay on loopback: map it to 127.0.0.1 in /etc/hosts"
        )
    return name


@dataclass
class UpReport:
    """Seconds from the start of ``up`` until each part was ready, and what was restored on the way."""

    seconds: dict[str, float] = field(default_factory=dict)
    restored: list[str] = field(default_factory=list)


class LocalCluster:
    """One local cluster under ``paths.cluster``; processes tracked in ``paths.run``."""

    def __init__(self, paths: K8sPaths, ports: ClusterPorts | None = None) -> None:
        self.paths = paths
        self.ports = ports or ClusterPorts()
        self.processes = {
            name: ManagedProcess(name=name, pidfile=paths.run / f"{name}.pid", logfile=paths.logs / f"{name}.log")
            for name in COMPONENTS
        }

    @property
    def kubectl(self) -> Kubectl:
        return Kubectl(self.paths.admin_kubeconfig)

    def running(self) -> dict[str, int]:
        return {name: pid for name, proc in self.processes.items() if (pid := proc.pid()) is not None}

    def _preflight(self, keda: bool) -> str:
        if os.geteuid() != 0:
            raise PlatformError("the local cluster needs root (a kubelet and containerd): run it as root")
        if self.running():
            raise PlatformError(f"the local cluster already runs ({self.running()}): stop it first (make k8s-down)")
        if self.paths.host_snapshot.exists():
            raise PlatformError(
                f"{self.paths.host_snapshot} is left from a cluster whose host changes were not undone: "
                "run `make k8s-down` first"
            )
        if missing := missing_binaries(self.paths, keda=keda):
            raise PlatformError(f"cluster binaries not built: {', '.join(missing)}; build them with `make k8s-build`")
        # An absolute path is a command too: the CNI plugins are not on PATH.
        ensure_commands({**NODE_PACKAGES, str(Path(CNI_PLUGIN_DIR, "bridge")): CNI_PACKAGE})
        name = node_name()
        for label, port in self.ports.claims().items():
            require_port_free(label, "127.0.0.1", port, "infra.k8s.versions.ClusterPorts")
        return name

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        base = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(self.paths.cluster)}
        self.processes[name].start(argv, env=env or base, cwd=self.paths.cluster)

    def _alive(self, name: str) -> None:
        """Fail at once, with its log, when a component died while we wait for it."""
        if (why := self.processes[name].exited_early()) is not None:
            raise PlatformError(f"{name} exited; the end of {self.processes[name].logfile}:\n{why}")

    def _wait(self, what: str, names: tuple[str, ...], check: Callable[[], bool]) -> None:
        def alive() -> None:
            for name in names:
                self._alive(name)

        wait_for(what, check, READY_TIMEOUT_S, alive=alive)

    def up(self, *, keda: bool = True, report: Report = print) -> UpReport:
        """Start everything and wait until it is ready; on any failure, stop what started and undo the host."""
        name = self._preflight(keda)
        host_state.capture().save(self.paths.host_snapshot)
        try:
            return self._up(name, keda, report)
        except BaseException:
            report("k8s: start failed; stopping what started and restoring the host")
            self.down(report=report)
            raise

    def _up(self, name: str, keda: bool, report: Report) -> UpReport:
        start = time.monotonic()
        result = UpReport()

        def mark(step: str) -> None:
            result.seconds[step] = round(time.monotonic() - start, 1)
            report(f"k8s: {step} at {result.seconds[step]}s")

        shutil.rmtree(self.paths.cluster, ignore_errors=True)
        for directory in (self.paths.run, self.paths.logs):
            directory.mkdir(parents=True, exist_ok=True)
        make_pki(self.paths.pki, apiserver_port=self.ports.apiserver, node_name=name)
        bins = {**k8s_binaries(self.paths), **keda_binaries(self.paths)}
        self._start("etcd", etcd_argv(self.paths, self.ports))
        config = node.write_containerd_files(self.paths)
        self._start("containerd", ["containerd", f"--config={config}"])
        self._wait("containerd's socket", ("containerd",), self.paths.containerd_socket.exists)
        import_busybox(self.paths)
        mark("containerd_ready")
        self._wait("etcd", ("etcd",), lambda: port_is_open("127.0.0.1", self.ports.etcd_client))
        self._start("kube-apiserver", apiserver_argv(self.paths, bins["kube-apiserver"], self.ports))
        kubectl = self.kubectl
        self._wait("the apiserver's /readyz", ("etcd", "kube-apiserver"),
                   lambda: kubectl.run("get", "--raw", "/readyz", check=False).strip() == "ok")  # fmt: skip
        mark("apiserver_ready")
        self._start("kube-controller-manager",
                    controller_manager_argv(self.paths, bins["kube-controller-manager"], self.ports))  # fmt: skip
        self._start("kube-scheduler", scheduler_argv(self.paths, bins["kube-scheduler"], self.ports))
        self._start("kubelet", node.kubelet_argv(self.paths, bins["kubelet"], self.ports))
        self._wait("the node to be Ready", ("kubelet", "containerd"), lambda: self.node_ready(name))
        mark("node_ready")
        # Pods are refused until the controller-manager made the namespace's service account.
        self._wait("the default service account", ("kube-controller-manager",),
                   lambda: kubectl.get("serviceaccount", "default", "--namespace=default") is not None)  # fmt: skip
        before = host_state.HostState.load(self.paths.host_snapshot)
        result.restored += host_state.restore_sysctls(before)  # the kubelet set them at start and does not again
        for done in result.restored:
            report(f"k8s: restored {done}")
        if keda:
            self._start_keda(bins)
            mark("keda_ready")
        (self.paths.run / "up.json").write_text(json.dumps(result.seconds) + "\n")
        return result

    def node_ready(self, name: str) -> bool:
        found = self.kubectl.get("node", name)
        conditions = (found or {}).get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _start_keda(self, bins: dict[str, Path]) -> None:
        kubectl = self.kubectl
        kubectl.apply_dir(keda_crd_dir(self.paths))
        kubectl.apply(metrics_api_objects(self.ports))
        (self.paths.cluster / "keda-home").mkdir(exist_ok=True)
        env = keda_env(self.paths)
        self._start("keda-operator", operator_argv(bins["keda-operator"], self.paths, self.ports), env)
        self._start("keda-adapter", adapter_argv(bins["keda-adapter"], self.paths, self.ports), env)

        def available() -> bool:
            found = kubectl.get("apiservice", "v1beta1.external.metrics.k8s.io")
            conditions = (found or {}).get("status", {}).get("conditions", [])
            return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

        self._wait("KEDA's external metrics API", ("keda-operator", "keda-adapter"), available)

    def down(self, *, report: Report = print) -> list[str]:
        """Stop everything by pid, undo the host changes; return what was done. Raises if the host is not
        as it was afterwards (the snapshot is kept, so a second ``down`` can try again)."""
        return teardown.stop_cluster(self, report)

    def status(self) -> dict[str, Any]:
        up = self.paths.run / "up.json"
        return {
            "running": self.running(),
            "ready_seconds": json.loads(up.read_text()) if up.exists() else None,
            "host_snapshot_pending": self.paths.host_snapshot.exists(),
        }

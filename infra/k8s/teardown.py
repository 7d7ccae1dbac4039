"""Stopping the local cluster: workloads first (so the kubelet tears their containers down), then every
process by pid, then the host put back from the snapshot taken before ``up``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from infra.k8s import host_state
from infra.k8s.kubectl import wait_for
from infra.k8s.node import CNI_BRIDGE
from infra.local.process import ManagedProcess
from infra.local.service import port_is_open
from schemas.errors import PlatformError

if TYPE_CHECKING:
    from infra.k8s.cluster import LocalCluster

Report = Callable[[str], None]

POD_TEARDOWN_S = 60.0
KILL_WAIT_S = 10.0


def exit_on_sigterm() -> None:
    """Make SIGTERM end the command by ``SystemExit``, through its ``finally`` blocks: the cluster is taken down
    and a child ``subprocess.run`` waits on (a 40-minute compile) is killed rather than orphaned."""

    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)


def mount_prefixes(cluster: LocalCluster) -> tuple[str, ...]:
    """Where the kubelet and containerd mount: the cluster dir (the kubelet's root, container rootfs) and the
    system paths they use by default."""
    return (str(cluster.paths.cluster), "/var/lib/kubelet", "/run/containerd/runc/k8s.io", "/run/netns")


def _stop(proc: ManagedProcess, report: Report) -> None:
    pid = proc.pid()
    if proc.stop(timeout_s=20.0):
        report(f"k8s: stopped {proc.name} (pid {pid})")


def _delete_pods(cluster: LocalCluster, report: Report) -> None:
    """Delete every pod while the kubelet still runs, and wait until the kubelet confirmed each is gone."""
    if not port_is_open("127.0.0.1", cluster.ports.apiserver) or cluster.processes["kubelet"].pid() is None:
        return
    kubectl = cluster.kubectl
    try:
        kubectl.run("delete", "pods", "--all", "--all-namespaces", "--grace-period=1", "--wait=false")
        wait_for("every pod to be torn down", lambda: not (kubectl.get("pods", "--all-namespaces") or {}).get("items"),
                 POD_TEARDOWN_S)  # fmt: skip
        report("k8s: every pod deleted by the kubelet")
    except PlatformError as exc:
        report(f"k8s: pods not all torn down by the kubelet ({exc}); removing their containers directly")


def _ctr(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    argv = ["ctr", "--address", str(cluster.paths.containerd_socket), "--namespace", "k8s.io", *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)


def _remove_containers(cluster: LocalCluster, report: Report) -> None:
    """Kill and delete whatever container is left in the private containerd (the kubelet is stopped)."""
    if cluster.processes["containerd"].pid() is None or not cluster.paths.containerd_socket.exists():
        return
    tasks = _ctr(cluster, "tasks", "ls", "-q").stdout.split()
    for task in tasks:
        _ctr(cluster, "tasks", "kill", "-s", "SIGKILL", task)
    for task in tasks:

        def deleted(task: str = task) -> bool:
            if _ctr(cluster, "tasks", "delete", task).returncode == 0:
                return True
            return task not in _ctr(cluster, "tasks", "ls", "-q").stdout.split()

        wait_for(f"task {task} to stop", deleted, KILL_WAIT_S)
    for container in _ctr(cluster, "containers", "ls", "-q").stdout.split():
        _ctr(cluster, "containers", "delete", container)
    if tasks:
        report(f"k8s: removed {len(tasks)} leftover container task(s)")


def shim_pids(socket_path: Path) -> list[int]:
    """containerd shims serving our private containerd: they name its socket on their command line."""
    pids = []
    needle = str(socket_path).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and needle in argv:
            pids.append(int(entry.name))
    return pids


def _stop_shims(cluster: LocalCluster, report: Report) -> None:
    pids = shim_pids(cluster.paths.containerd_socket)
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_WAIT_S
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if Path(f"/proc/{p}").exists()]
        time.sleep(0.1)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    if pids:
        report(f"k8s: killed shims {pids}")


def _keep_logs(cluster: LocalCluster) -> None:
    """The last run's logs stay readable after ``down`` (the cluster dir goes)."""
    kept = cluster.paths.root / "last-run-logs"
    shutil.rmtree(kept, ignore_errors=True)
    if cluster.paths.logs.is_dir():
        shutil.copytree(cluster.paths.logs, kept)


def stop_cluster(cluster: LocalCluster, report: Report) -> list[str]:
    procs = cluster.processes
    for name in ("keda-adapter", "keda-operator", "kube-controller-manager", "kube-scheduler"):
        _stop(procs[name], report)
    _delete_pods(cluster, report)
    _stop(procs["kubelet"], report)
    _remove_containers(cluster, report)
    _stop(procs["containerd"], report)
    _stop_shims(cluster, report)
    for name in ("kube-apiserver", "etcd"):
        _stop(procs[name], report)
    if cluster.running():
        raise PlatformError(f"still running after down: {cluster.running()}")
    done: list[str] = []
    snapshot = cluster.paths.host_snapshot
    prefixes = mount_prefixes(cluster)
    if snapshot.exists():
        before = host_state.HostState.load(snapshot)
        done += host_state.restore_iptables(before)
        done += host_state.restore_mounts(before, prefixes)
        done += host_state.restore_cgroups(before)
        done += host_state.restore_links(before, (CNI_BRIDGE,))
        done += host_state.restore_dirs(before)
        done += host_state.restore_sysctls(before)
        for action in done:
            report(f"k8s: restored: {action}")
    left = [m for m in host_state.read_mounts() if m.startswith(str(cluster.paths.cluster) + "/")]
    if left:
        raise PlatformError(f"mounts left under {cluster.paths.cluster}, not removing it: {left}")
    _keep_logs(cluster)
    shutil.rmtree(cluster.paths.cluster, ignore_errors=True)
    if snapshot.exists():
        remaining = host_state.differences(before, host_state.capture(), prefixes)
        if remaining:
            raise PlatformError("the host is not as it was before the cluster: " + "; ".join(remaining))
        snapshot.unlink()
    return done

"""A host snapshot round-trips through its file, and any change since it is reported."""

from __future__ import annotations

from pathlib import Path

from infra.k8s.host_state import HostState, differences


def _state() -> HostState:
    return HostState(
        sysctls={"vm.overcommit_memory": "0", "kernel.panic": "1"},
        iptables_rules={"iptables": {"filter": ["-P INPUT ACCEPT"]}},
        mounts=["/", "/proc"],
        dirs={"/var/lib/kubelet": False},
        cgroups=[],
        links=["eth0", "lo"],
    )


def test_snapshot_round_trips(tmp_path: Path) -> None:
    state = _state()
    state.save(tmp_path / "snap.json")
    assert HostState.load(tmp_path / "snap.json") == state


def test_an_unchanged_host_has_no_differences() -> None:
    assert differences(_state(), _state(), ("/work/k8s",)) == []


def test_every_kind_of_change_is_reported() -> None:
    after = _state()
    after.sysctls["kernel.panic"] = "10"
    after.iptables_rules["iptables"]["filter"] += ["-N KUBE-FIREWALL", "-A INPUT -j KUBE-FIREWALL"]
    after.mounts += ["/work/k8s/kubelet/root", "/var/lib/docker/overlay2/x/merged"]
    after.dirs["/var/lib/kubelet"] = True
    after.cgroups.append("/sys/fs/cgroup/memory/kubepods")
    after.links.append("rsk8s0")
    found = differences(_state(), after, ("/work/k8s",))
    assert "sysctl kernel.panic: 1 -> 10" in found
    assert "iptables -t filter added: -A INPUT -j KUBE-FIREWALL" in found
    assert "mount added: /work/k8s/kubelet/root" in found
    assert not any("overlay2" in d for d in found)  # other programs' mounts are theirs
    assert "dir /var/lib/kubelet: existed False -> True" in found
    assert "cgroup added: /sys/fs/cgroup/memory/kubepods" in found
    assert "link added: rsk8s0" in found

"""``host_state.restore_iptables`` undoes what the kubelet does to iptables (a chain jumped to from INPUT, empty
canary chains in three tables of both families, the tables iptables-nft creates for them) and nothing else.

Real iptables on this host, no cluster needed: root and iptables-nft with ``nft`` (apt: nftables). The chains
added are empty or RETURN only, so no packet is treated differently while the test runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from infra.k8s import host_state

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.skipif(os.geteuid() != 0, reason="changes iptables: needs root"),
    pytest.mark.skipif(shutil.which("nft") is None, reason="needs nft (apt-get install nftables)"),
]

CHAIN = "KUBE-RS-RESTORE-TEST"


@pytest.fixture
def before() -> Iterator[host_state.HostState]:
    state = host_state.capture()
    yield state
    host_state.restore_iptables(state)  # whatever the test left


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def test_kubelet_like_chains_are_removed_and_nothing_else(before: host_state.HostState) -> None:
    _run("iptables", "-w", "-N", "RS-PREEXISTING")  # somebody else's chain, there before the snapshot
    keep = host_state.capture()
    try:
        for command in ("iptables", "ip6tables"):
            for table in ("filter", "nat", "mangle"):
                _run(command, "-w", "-t", table, "-N", CHAIN)
        _run("iptables", "-w", "-I", "INPUT", "-j", CHAIN)
        _run("iptables", "-w", "-A", CHAIN, "!", "-s", "127.0.0.0/8", "-d", "127.0.0.0/8", "-j", "RETURN")
        assert host_state.differences(keep, host_state.capture(), ()) != []
        done = host_state.restore_iptables(keep)
        assert "iptables -t filter -D INPUT -j " + CHAIN in done
        assert host_state.differences(keep, host_state.capture(), ()) == []
        assert "-N RS-PREEXISTING" in host_state.read_iptables()["iptables"]["filter"]
    finally:
        _run("iptables", "-w", "-X", "RS-PREEXISTING")
        host_state.restore_iptables(before)
    assert host_state.differences(before, host_state.capture(), ()) == []

"""The docker seccomp profile decides every probe as the BPF filter does."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tests.unit.workers.sandbox.seccomp_bpf import (
    ALLOW,
    ARCHES,
    AUDIT,
    CLONE_NEW,
    FIONREAD,
    FORK_FLAGS,
    IPPROTO_TCP,
    NUMBERS,
    SPAWN_FLAGS,
    TCGETS,
    THREAD_FLAGS,
    TIOCSTI,
    ret_errno,
    run_bpf,
    seccomp_data,
)
from workers.sandbox.seccomp import build_filter, denied_syscalls, docker_profile

# --- the docker profile decides like the BPF program --------------------------------------------------


def _profile_decision(profile: dict[str, Any], names: Mapping[str, int], data: bytes) -> int:
    """libseccomp semantics for this profile: default allow, an ERRNO rule matches when all its args do."""
    nr, _arch, _ip, *args = struct.unpack("<IIQ6Q", data)
    by_nr = {number: name for name, number in names.items()}
    rules = profile["syscalls"]
    assert isinstance(rules, list)
    for rule in rules:
        if by_nr.get(nr) not in rule["names"]:
            continue
        assert rule["action"] == "SCMP_ACT_ERRNO"
        matched = True
        for cond in rule.get("args", []):
            arg = args[cond["index"]]
            op = cond["op"]
            if op == "SCMP_CMP_EQ":
                matched &= arg == cond["value"]
            elif op == "SCMP_CMP_GT":
                matched &= arg > cond["value"]
            elif op == "SCMP_CMP_MASKED_EQ":
                matched &= (arg & cond["value"]) == cond["valueTwo"]
            else:
                raise AssertionError(op)
        if matched:
            return ret_errno(rule["errnoRet"])
    return ALLOW


def _probes(arch: str) -> Iterator[tuple[int, ...]]:
    numbers = NUMBERS[arch]
    for nr in range(1024):
        yield (nr,)
    for family in range(64):
        yield (numbers["socket"], family, 1, 0)
    for flags in (THREAD_FLAGS, FORK_FLAGS, SPAWN_FLAGS, *CLONE_NEW.values()):
        yield (numbers["clone"], flags)
    for cmd in (TIOCSTI, TCGETS, FIONREAD):
        yield (numbers["ioctl"], 0, cmd)
    for level in (0, 1, IPPROTO_TCP, 41, IPPROTO_TCP + (1 << 32), 1 + (1 << 32)):
        for option in (*range(64), 14 + (1 << 32), 8 + (1 << 32)):
            yield (numbers["setsockopt"], 3, level, option)


@pytest.mark.parametrize("arch", ARCHES)
def test_docker_profile_matches_the_bpf_filter(arch: str) -> None:
    profile = json.loads(docker_profile(arch))
    scmp = {"x86_64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64"}[arch]
    assert (profile["defaultAction"], profile["architectures"]) == ("SCMP_ACT_ALLOW", [scmp])
    assert set(profile["syscalls"][0]["names"]) == denied_syscalls(arch)
    named = {name for rule in profile["syscalls"] for name in rule["names"]}
    assert named <= NUMBERS[arch].keys()  # nothing libseccomp could not resolve on this arch
    prog = build_filter(arch)
    for probe in _probes(arch):
        data = seccomp_data(probe[0], AUDIT[arch], *probe[1:])
        assert _profile_decision(profile, NUMBERS[arch], data) == run_bpf(prog, data), probe

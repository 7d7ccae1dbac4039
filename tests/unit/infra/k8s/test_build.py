"""The wrapper modules pin exactly what the published modules need (the traps of k8s-local.md)."""

from __future__ import annotations

import re
from pathlib import Path

from infra.k8s.build import k8s_binaries, k8s_go_mod, k8s_ldflags, keda_binaries, keda_go_mod, missing_binaries
from infra.k8s.layout import K8sPaths
from infra.k8s.versions import K8S_STAGING_VERSION


def test_every_staging_module_is_pinned_to_the_published_version() -> None:
    replaces = re.findall(r"^\tk8s\.io/(\S+) => k8s\.io/(\S+) (\S+)$", k8s_go_mod(), flags=re.MULTILINE)
    assert len(replaces) == 31
    assert all(old == new and version == K8S_STAGING_VERSION for old, new, version in replaces)
    names = {old for old, _, _ in replaces}
    assert {"cri-streaming", "endpointslice", "externaljwt"} <= names  # new in 1.37, missing from older recipes
    assert "require k8s.io/kubernetes v1.37.2" in k8s_go_mod()


def test_keda_wrapper_repeats_kedas_replace_and_exclude() -> None:
    text = keda_go_mod()
    assert "require github.com/kedacore/keda/v2 v2.21.0" in text
    assert "replace github.com/nexus-rpc/nexus-proto-annotations v0.1.0 => " in text
    assert "exclude github.com/go-chi/chi/v5 v5.2.3" in text


def test_binaries_report_their_version() -> None:
    flags = k8s_ldflags()
    assert "version.gitVersion=v1.37.2" in flags
    assert "gitMajor=1" in flags
    assert "gitMinor=37" in flags


def test_missing_binaries_are_named_and_keyed_on_the_go_version(tmp_path: Path) -> None:
    paths = K8sPaths(tmp_path, "go1.26.8")
    assert missing_binaries(paths) == sorted([*k8s_binaries(paths), *keda_binaries(paths)])
    for binary in k8s_binaries(paths).values():
        binary.parent.mkdir(parents=True, exist_ok=True)
        binary.write_text("")
        binary.chmod(0o755)
    assert missing_binaries(paths, keda=False) == []
    assert missing_binaries(paths) == ["keda-adapter", "keda-operator"]
    assert "go1.26.8" in str(paths.k8s_bin)

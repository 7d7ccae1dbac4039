"""Build (or reuse) the cluster's binaries from source through the Go module proxy.

``k8s.io/kubernetes`` and KEDA are used as libraries of small wrapper modules whose go.mod repeats their
``replace`` blocks (neither can be ``go install``-ed as is). A cold build costs about 60 CPU-minutes, so it runs
under ``nice -n 19`` with a limited number of parallel compiles (other work on the machine keeps its CPUs), and
the binaries are cached outside the repo, keyed on their version and the Go version, and reused when present.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from infra.k8s.layout import K8sPaths
from infra.k8s.versions import (
    K8S_COMMANDS,
    K8S_STAGING_MODULES,
    K8S_STAGING_VERSION,
    K8S_VERSION,
    KEDA_COMMANDS,
    KEDA_GO_MOD_EXTRA,
    KEDA_VERSION,
)
from infra.local.download import require_free_space
from infra.local.process import tail
from schemas.errors import PlatformError

Report = Callable[[str], None]

K8S_MODULE = "k8s.io/kubernetes"
KEDA_MODULE = "github.com/kedacore/keda/v2"
GO_MIN_MINOR = 26
"""Both wrapper modules say ``go 1.26.0``."""
COLD_BUILD_MB = 12_000
"""Modules (2.4 GB), the Go build cache (7 GB) and the binaries (0.7 GB) of a cold build."""


def find_go() -> str:
    """The ``go`` command, checked new enough for the pinned modules."""
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        raise PlatformError("the Go toolchain (go >= 1.26) is needed to build the cluster: install it from go.dev")
    version = go_version(go)
    minor = int(version.removeprefix("go").split(".")[1])
    if minor < GO_MIN_MINOR:
        raise PlatformError(f"{go} is {version}; building Kubernetes {K8S_VERSION} needs go1.{GO_MIN_MINOR} or newer")
    return go


def go_version(go: str) -> str:
    """``go1.26.8``: part of the cache key of every binary."""
    result = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False)
    if result.returncode != 0 or not result.stdout.startswith("go"):
        raise PlatformError(f"cannot read the Go version from {go}: {result.stderr.strip()}")
    return result.stdout.strip()


def k8s_go_mod() -> str:
    replaces = "\n".join(f"\tk8s.io/{m} => k8s.io/{m} {K8S_STAGING_VERSION}" for m in K8S_STAGING_MODULES)
    return (
        f"module example.com/k8sbins\n\ngo 1.26.0\n\nrequire {K8S_MODULE} {K8S_VERSION}\n\nreplace (\n{replaces}\n)\n"
    )


def keda_go_mod() -> str:
    return f"module example.com/kedabins\n\ngo 1.26.0\n\nrequire {KEDA_MODULE} {KEDA_VERSION}\n{KEDA_GO_MOD_EXTRA}"


def k8s_ldflags() -> str:
    """Without the version stamps the binaries report v0.0.0 (the apiserver's /version, the node's kubelet)."""
    major, minor = K8S_VERSION.removeprefix("v").split(".")[:2]
    stamp = "-X k8s.io/component-base/version."
    return f"-s -w {stamp}gitVersion={K8S_VERSION} {stamp}gitMajor={major} {stamp}gitMinor={minor}"


def keda_ldflags() -> str:
    return f"-s -w -X {KEDA_MODULE}/version.Version={KEDA_VERSION.removeprefix('v')}"


def k8s_binaries(paths: K8sPaths) -> dict[str, Path]:
    return {name: paths.k8s_bin / name for name in K8S_COMMANDS}


def keda_binaries(paths: K8sPaths) -> dict[str, Path]:
    return {f"keda-{name}": paths.keda_bin / f"keda-{name}" for name in KEDA_COMMANDS}


def missing_binaries(paths: K8sPaths, *, keda: bool = True) -> list[str]:
    wanted = {**k8s_binaries(paths), **(keda_binaries(paths) if keda else {})}
    return sorted(name for name, path in wanted.items() if not os.access(path, os.X_OK))


class GoBuilder:
    """Runs ``go get`` and ``go build`` in a wrapper module, niced, with a bounded number of compiles."""

    def __init__(self, paths: K8sPaths, go: str, *, jobs: int, report: Report) -> None:
        self._paths = paths
        self._go = go
        self._jobs = jobs
        self._report = report
        self._env = {
            **os.environ,
            "GOMAXPROCS": str(max(jobs, 1)),
            "GOFLAGS": "-buildvcs=false",
            "GOTOOLCHAIN": "local",
        }

    def _run(self, argv: list[str], module_dir: Path, log_name: str) -> float:
        self._paths.build_logs.mkdir(parents=True, exist_ok=True)
        log = self._paths.build_logs / f"{log_name}.log"
        start = time.monotonic()
        with log.open("wb") as out:
            result = subprocess.run(
                ["nice", "-n", "19", self._go, *argv],
                cwd=module_dir, env=self._env, stdout=out, stderr=subprocess.STDOUT, check=False,
            )  # fmt: skip
        if result.returncode != 0:
            raise PlatformError(f"go {argv[0]} failed in {module_dir} (see {log}): {tail(log, 5)}")
        return time.monotonic() - start

    def module(self, name: str, go_mod: str, commands: list[str]) -> Path:
        """The wrapper module's dir, its go.mod written and its dependencies fetched."""
        module_dir = self._paths.src / name
        module_dir.mkdir(parents=True, exist_ok=True)
        if not (module_dir / "go.mod").exists():
            (module_dir / "go.mod").write_text(go_mod)
        seconds = self._run(["get", *commands], module_dir, f"{name}-get")
        self._report(f"k8s build: {name} modules fetched in {seconds:.0f}s")
        return module_dir

    def build(self, module_dir: Path, package: str, ldflags: str, dest: Path) -> float:
        """Build one command to ``dest`` (written under a temporary name, so a killed build leaves nothing)."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial = dest.with_name(dest.name + ".partial")
        argv = ["build", "-p", str(self._jobs), "-trimpath", "-ldflags", ldflags, "-o", str(partial), package]
        seconds = self._run(argv, module_dir, dest.name)
        partial.replace(dest)
        self._report(f"k8s build: {dest.name} built in {seconds:.0f}s")
        return seconds


def ensure_binaries(paths: K8sPaths, *, keda: bool = True, jobs: int = 1, report: Report = print) -> dict[str, float]:
    """Build whatever binary is missing; return the wall seconds of each step that ran (recorded next to them)."""
    missing = missing_binaries(paths, keda=keda)
    if not missing:
        return {}
    go = find_go()
    require_free_space(paths.root, COLD_BUILD_MB)
    builder = GoBuilder(paths, go, jobs=jobs, report=report)
    timings: dict[str, float] = {}
    start = time.monotonic()
    k8s_missing = [n for n in K8S_COMMANDS if n in missing]
    if k8s_missing:
        module_dir = builder.module(
            "k8sbins", k8s_go_mod(), [f"{K8S_MODULE}/cmd/{n}@{K8S_VERSION}" for n in K8S_COMMANDS]
        )
        for name in k8s_missing:
            timings[name] = builder.build(module_dir, f"{K8S_MODULE}/cmd/{name}", k8s_ldflags(), paths.k8s_bin / name)
    keda_missing = [n for n in KEDA_COMMANDS if f"keda-{n}" in missing]
    if keda_missing:
        module_dir = builder.module(
            "kedabins", keda_go_mod(), [f"{KEDA_MODULE}/cmd/{n}@{KEDA_VERSION}" for n in KEDA_COMMANDS]
        )
        for name in keda_missing:
            dest = paths.keda_bin / f"keda-{name}"
            timings[dest.name] = builder.build(module_dir, f"{KEDA_MODULE}/cmd/{name}", keda_ldflags(), dest)
    timings["total"] = time.monotonic() - start
    record = paths.build_logs / f"build-{int(time.time())}.json"
    record.write_text(json.dumps({"jobs": jobs, "seconds": timings}, indent=2) + "\n")
    return timings


def keda_crd_dir(paths: K8sPaths) -> Path:
    """KEDA's CRDs, from its module in the Go module cache (a 3 MB download when the module is not there yet)."""
    go = find_go()
    module_dir = paths.src / "kedabins"
    module_dir.mkdir(parents=True, exist_ok=True)
    if not (module_dir / "go.mod").exists():
        (module_dir / "go.mod").write_text(keda_go_mod())
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{KEDA_MODULE}@{KEDA_VERSION}"],
        cwd=module_dir, capture_output=True, text=True, check=False, env={**os.environ, "GOFLAGS": "-mod=mod"},
    )  # fmt: skip
    if result.returncode != 0:
        raise PlatformError(f"cannot download KEDA {KEDA_VERSION}'s module for its CRDs: {result.stderr.strip()}")
    crds = Path(json.loads(result.stdout)["Dir"]) / "config" / "crd" / "bases"
    if not crds.is_dir():
        raise PlatformError(f"KEDA's module has no CRDs at {crds}")
    return crds

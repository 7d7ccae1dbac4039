"""Where ``deploy-check`` gets its tools and schemas offline-friendly: all through the Go module proxy (the one
route to Kubernetes' own files here: no GitHub), fetched with the ordinary ``go`` client (checksums verified
against the sum database) and cached outside the repo, keyed by version.

- ``helm``: built from ``helm.sh/helm/v3`` (``go install``), once per version, into ``<cache>/bin``.
- Kubernetes' OpenAPI v3 documents: ``api/openapi-spec/v3`` of the ``k8s.io/kubernetes`` module.
- KEDA's CRDs: ``config/crd/bases`` of ``github.com/kedacore/keda/v2``.
- The Prometheus operator's CRDs (ServiceMonitor, PrometheusRule): ``example/prometheus-operator-crd``.
- Strimzi's KafkaTopic: no registry serves Strimzi's CRDs (its Maven jars carry classes only), so the chart
  ships the schema of the fields it uses (``crds/kafkatopic.schema.json``, from Strimzi's API reference).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from schemas.caps import STDERR_TAIL_BYTES
from schemas.errors import PlatformError

HELM_MODULE = "helm.sh/helm/v3"
HELM_VERSION = "v3.22.0"
KUBERNETES_VERSION = "v1.37.2"
KEDA_VERSION = "v2.21.0"
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"
_GO_TIMEOUT_S = 1800.0


@dataclass(frozen=True, slots=True)
class SchemaSources:
    """The directories the validator reads."""

    openapi_dir: Path
    crd_dirs: tuple[Path, ...]
    extra_crd_schemas: tuple[Path, ...]


def cache_dir() -> Path:
    """``$RS_CACHE_DIR`` or ``~/.cache/rewardstream``: the platform's cache, outside the repo."""
    return Path(os.environ.get("RS_CACHE_DIR") or Path.home() / ".cache" / "rewardstream")


def go_binary() -> str:
    """The ``go`` command: on PATH, else the usual install location."""
    found = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if found is None:
        raise PlatformError("go is not installed (needed to fetch helm and the schemas through the Go module proxy)")
    return found


def _go(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    proc = subprocess.run(
        [go_binary(), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=_GO_TIMEOUT_S,
        env={**os.environ, "GOFLAGS": "-mod=mod", **(env or {})},
        cwd=cwd,
    )
    if proc.returncode != 0:
        raise PlatformError(f"go {' '.join(args[:2])} failed: {proc.stderr.strip()[-STDERR_TAIL_BYTES:]}")
    return proc.stdout


def module_dir(module: str, version: str) -> Path:
    """The extracted source of ``module@version`` (``go mod download``: fetched once, then from the cache)."""
    info = json.loads(_go("mod", "download", "-json", f"{module}@{version}", cwd=Path("/")))
    if info.get("Error"):
        raise PlatformError(f"go mod download {module}@{version}: {info['Error']}")
    return Path(info["Dir"])


def ensure_helm() -> Path:
    """``helm`` of ``HELM_VERSION``, built through the Go proxy the first time (a few minutes), then cached."""
    binary = cache_dir() / "bin" / f"helm-{HELM_VERSION}"
    if binary.is_file():
        return binary
    gobin = binary.with_name(binary.name + ".build")
    shutil.rmtree(gobin, ignore_errors=True)
    ldflags = f"-s -w -X helm.sh/helm/v3/internal/version.version={HELM_VERSION}"
    _go(
        "install",
        "-trimpath",
        "-ldflags",
        ldflags,
        f"{HELM_MODULE}/cmd/helm@{HELM_VERSION}",
        env={"GOBIN": str(gobin), "GOFLAGS": ""},
        cwd=Path("/"),
    )
    (gobin / "helm").rename(binary)
    shutil.rmtree(gobin, ignore_errors=True)
    return binary


def ensure_schemas(chart_crds: Path) -> SchemaSources:
    """The OpenAPI documents and CRDs of the pinned versions (from the module cache once fetched)."""
    kubernetes = module_dir("k8s.io/kubernetes", KUBERNETES_VERSION)
    keda = module_dir("github.com/kedacore/keda/v2", KEDA_VERSION)
    prometheus = module_dir("github.com/prometheus-operator/prometheus-operator", PROMETHEUS_OPERATOR_VERSION)
    return SchemaSources(
        openapi_dir=kubernetes / "api" / "openapi-spec" / "v3",
        crd_dirs=(keda / "config" / "crd" / "bases", prometheus / "example" / "prometheus-operator-crd"),
        extra_crd_schemas=tuple(sorted(chart_crds.glob("*.schema.json"))),
    )

"""``python -m infra.helm.check``: what ``make deploy-check`` runs. Renders the chart with ``helm template`` for
each value set in ``rewardstream/ci/`` (and the defaults), lints it, validates every manifest offline
(``validate``, ``semantics``); exit 0 iff all pass. Also checks the KafkaTopic template is what the topic
catalog makes, the Grafana dashboard what ``infra/monitoring/dashboard.py`` makes, and that every setting a
deployment runs with is set by the chart or left to ``settings:`` on purpose (``settings_coverage``). Prints
what it checked and how long each part took.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from infra.helm import settings_coverage, topics
from infra.helm.semantics import check_all
from infra.helm.sources import KUBERNETES_VERSION, ensure_helm, ensure_schemas
from infra.helm.validate import Validator, describe, load_manifests
from infra.monitoring import dashboard
from schemas.caps import STDERR_TAIL_BYTES
from schemas.errors import RewardstreamError

HERE = Path(__file__).resolve().parent
CHART = HERE / "rewardstream"
_HELM_TIMEOUT_S = 120.0


def value_sets(chart: Path) -> list[tuple[str, list[str]]]:
    """(label, helm args): the defaults (with the gateway token a non-loopback gateway requires), then each
    ``ci/*-values.yaml`` of the chart."""
    sets: list[tuple[str, list[str]]] = [("defaults", ["--set", "credentials.gatewayTokens=deploy-check"])]
    sets += [(path.name, ["--values", str(path)]) for path in sorted((chart / "ci").glob("*-values.yaml"))]
    return sets


def _helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, check=False, timeout=_HELM_TIMEOUT_S)


def render(helm: Path, chart: Path, args: Sequence[str]) -> str:
    """``helm template`` of the chart with ``args``; a failure (a value the schema refuses, a ``fail``) raises."""
    proc = _helm(
        helm, "template", "rs", str(chart), "--namespace", "rewardstream", "--kube-version", KUBERNETES_VERSION, *args
    )
    if proc.returncode != 0:
        raise RenderError(proc.stderr.strip()[-STDERR_TAIL_BYTES:])
    return proc.stdout


class RenderError(RewardstreamError):
    """helm could not render the chart with these values."""


def check(chart: Path, extra: Sequence[str]) -> list[str]:
    """Every problem found, as ``<value set>: <Kind/name>: <what>``; empty when all pass."""
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    helm = ensure_helm()
    timings["helm"] = time.monotonic() - t0
    t0 = time.monotonic()
    validator = Validator(ensure_schemas(HERE / "crds"))
    timings["schemas"] = time.monotonic() - t0
    problems: list[str] = []
    if chart == CHART and topics.main(["--check"]) != 0:
        problems.append("templates/kafkatopics.yaml is stale: run python -m infra.helm.topics")
    if chart == CHART and dashboard.main(["--check"]) != 0:
        problems.append("dashboards/rewardstream.json is stale: run python -m infra.monitoring.dashboard")
    if chart == CHART:
        problems += [f"settings: {p}" for p in settings_coverage.problems(chart)]
    t0 = time.monotonic()
    lint = _helm(helm, "lint", "--strict", "--kube-version", KUBERNETES_VERSION, str(chart), *extra)
    if lint.returncode != 0:
        problems.append(f"helm lint: {lint.stdout.strip()[-STDERR_TAIL_BYTES:]}")
    checked = 0
    for label, args in value_sets(chart) if not extra else [("given values", list(extra))]:
        try:
            manifests = load_manifests(render(helm, chart, args))
        except RenderError as exc:
            problems.append(f"{label}: helm template failed: {exc}")
            continue
        checked += len(manifests)
        for manifest in manifests:
            problems += [f"{label}: {describe(manifest)}: {e}" for e in validator.errors(manifest)]
        problems += [f"{label}: {e}" for e in check_all(manifests)]
    timings["render+validate"] = time.monotonic() - t0
    spent = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in timings.items())
    print(f"deploy-check: {checked} manifests checked; {spent}", file=sys.stderr)
    return problems


def main(argv: list[str] | None = None) -> int:
    """Exit 0 iff every manifest of every value set passes."""
    parser = argparse.ArgumentParser(prog="python -m infra.helm.check", description=__doc__)
    parser.add_argument("--chart", type=Path, default=CHART)
    parser.add_argument("helm_args", nargs="*", help="check only these helm values args (after --)")
    args = parser.parse_args(argv)
    try:
        problems = check(args.chart, args.helm_args)
    except RewardstreamError as exc:
        print(f"deploy-check: error: {exc}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"deploy-check: {problem}", file=sys.stderr)
    print(f"deploy-check: {'FAILED' if problems else 'ok'} ({len(problems)} problems)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

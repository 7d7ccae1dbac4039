"""What the apiserver refuses that no schema says: names, label syntax, a Deployment's selector matching its
pods, each ScaledObject and PodDisruptionBudget pointing at a Deployment of the same render, KEDA's replica
bounds, each KEDA trigger's authenticationRef naming a TriggerAuthentication of the render, and each key a pod or a
TriggerAuthentication requires from a Secret of the render being in it (a role's own Kafka principal's keys). Cheap
and offline; the first errors a hand edit of the chart makes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from infra.helm.validate import Manifest, describe

#: The alerting and recording rules the local Prometheus loads; the chart's PrometheusRule must carry them as is.
RULES = Path(__file__).resolve().parent / "rewardstream" / "rules" / "rewardstream.yml"
#: The generated Grafana dashboard; the chart's dashboard ConfigMap must carry it as is.
DASHBOARD = Path(__file__).resolve().parent / "rewardstream" / "dashboards" / "rewardstream.json"

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_SUBDOMAIN_MAX = 253
_LABEL_MAX = 63
_PORT_NAME_MAX = 15
_QUANTITY = re.compile(r"^([0-9.]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_SUFFIX = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}  # fmt: skip


def quantity(value: object) -> float | None:
    """A Kubernetes quantity (``250m``, ``2Gi``, ``2``) as a number; None when it is not one."""
    match = _QUANTITY.match(str(value))
    if match is None:
        return None
    return float(match.group(1)) * _SUFFIX.get(match.group(2) or "", 1.0)


def _resource_errors(container: dict[str, Any]) -> Iterator[str]:
    """The apiserver refuses a request above its limit."""
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for name in set(requests) & set(limits):
        low, high = quantity(requests[name]), quantity(limits[name])
        if low is not None and high is not None and low > high:
            yield f"container {container.get('name')}: {name} request {requests[name]} exceeds its limit {limits[name]}"


def _name_errors(manifest: Manifest) -> Iterator[str]:
    name = (manifest.get("metadata") or {}).get("name")
    if not isinstance(name, str):
        yield "metadata.name is missing"
        return
    if manifest.get("kind") == "Service":
        if len(name) > _LABEL_MAX or not _DNS_LABEL.match(name):
            yield f"metadata.name {name!r} is not a DNS-1035 label (a Service's name)"
    elif len(name) > _SUBDOMAIN_MAX or not _SUBDOMAIN.match(name):
        yield f"metadata.name {name!r} is not a DNS-1123 subdomain"


def _label_errors(labels: Any, where: str) -> Iterator[str]:
    for key, value in (labels or {}).items():
        if not isinstance(value, str) or len(value) > _LABEL_MAX or not _LABEL_VALUE.match(value):
            yield f"{where}: label {key}={value!r} is not a valid label value"


def _deployment_errors(manifest: Manifest) -> Iterator[str]:
    spec = manifest.get("spec") or {}
    selector = (spec.get("selector") or {}).get("matchLabels") or {}
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    yield from _label_errors(labels, "spec.template.metadata.labels")
    if any(labels.get(key) != value for key, value in selector.items()):
        yield "spec.selector.matchLabels does not match spec.template.metadata.labels"
    for container in (spec.get("template") or {}).get("spec", {}).get("containers", []):
        yield from _resource_errors(container)
        for port in container.get("ports") or []:
            if len(str(port.get("name", ""))) > _PORT_NAME_MAX:
                yield f"container {container.get('name')}: port name {port['name']!r} is over 15 characters"


def _network_policy_errors(manifest: Manifest) -> Iterator[str]:
    """An empty peer (``{}``) is refused by the apiserver ("must specify a peer"); no peers means any."""
    spec = manifest.get("spec") or {}
    for direction, side in (("ingress", "from"), ("egress", "to")):
        for n, rule in enumerate(spec.get(direction) or []):
            for peer in rule.get(side) or []:
                if not any(key in peer for key in ("podSelector", "namespaceSelector", "ipBlock")):
                    yield f"spec.{direction}[{n}].{side}: an empty peer (list none to mean any)"


def _secret_keys(manifests: list[Manifest]) -> dict[str, set[str]]:
    """The keys of each Secret the render makes (an existing Secret is not here: its keys are unknown offline)."""
    return {(m.get("metadata") or {}).get("name", ""): {*(m.get("stringData") or {}), *(m.get("data") or {})}
            for m in manifests if m.get("kind") == "Secret"}  # fmt: skip


def _required_secret_refs(manifest: Manifest) -> Iterator[tuple[str, str]]:
    """(Secret, key) each required reference of a Deployment's containers or a TriggerAuthentication."""
    spec = manifest.get("spec") or {}
    if manifest.get("kind") == "TriggerAuthentication":
        yield from ((ref.get("name", ""), ref.get("key", "")) for ref in spec.get("secretTargetRef") or [])
    elif manifest.get("kind") == "Deployment":
        pod = (spec.get("template") or {}).get("spec") or {}
        for container in pod.get("containers") or []:
            for env in container.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if ref and not ref.get("optional"):
                    yield ref.get("name", ""), ref.get("key", "")


def _reference_errors(manifests: list[Manifest]) -> Iterator[str]:
    """A trigger authenticating with no TriggerAuthentication of the render, a required key a made Secret lacks."""
    auths = {(m.get("metadata") or {}).get("name") for m in manifests if m.get("kind") == "TriggerAuthentication"}
    secrets = _secret_keys(manifests)
    for manifest in manifests:
        where = describe(manifest)
        if manifest.get("kind") == "ScaledObject":
            for trigger in (manifest.get("spec") or {}).get("triggers") or []:
                ref = (trigger.get("authenticationRef") or {}).get("name")
                if ref is not None and ref not in auths:
                    yield f"{where}: a trigger's authenticationRef names {ref!r}, no TriggerAuthentication here"
        for secret, key in _required_secret_refs(manifest):
            if secret in secrets and key not in secrets[secret]:
                yield f"{where}: requires key {key!r} of Secret {secret!r}, which does not hold it"


def check_all(manifests: list[Manifest]) -> Iterator[str]:
    """``Kind/name: problem`` for each cross-object or syntax rule broken."""
    deployments = {(m.get("metadata") or {}).get("name"): m for m in manifests if m.get("kind") == "Deployment"}
    yield from _reference_errors(manifests)
    for manifest in manifests:
        where = describe(manifest)
        yield from (f"{where}: {e}" for e in _name_errors(manifest))
        yield from (f"{where}: {e}" for e in _label_errors((manifest.get("metadata") or {}).get("labels"), "labels"))
        kind, spec = manifest.get("kind"), manifest.get("spec") or {}
        if kind == "Deployment":
            yield from (f"{where}: {e}" for e in _deployment_errors(manifest))
        elif kind == "ScaledObject":
            target = (spec.get("scaleTargetRef") or {}).get("name")
            if target not in deployments:
                yield f"{where}: scaleTargetRef names {target!r}, no Deployment of this render"
            low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
            if isinstance(low, int) and isinstance(high, int) and low > high:
                yield f"{where}: minReplicaCount {low} > maxReplicaCount {high}"
        elif kind == "NetworkPolicy":
            yield from (f"{where}: {e}" for e in _network_policy_errors(manifest))
        elif kind == "PrometheusRule":
            yield from (f"{where}: {e}" for e in rule_errors(spec))
        elif kind == "ConfigMap" and DASHBOARD.name in (manifest.get("data") or {}):
            yield from (f"{where}: {e}" for e in dashboard_errors(manifest["data"][DASHBOARD.name]))
        elif kind == "PodDisruptionBudget":
            selector = (spec.get("selector") or {}).get("matchLabels") or {}
            pods = [((d.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels", {})
                    for d in deployments.values()]  # fmt: skip
            if not any(all(labels.get(k) == v for k, v in selector.items()) for labels in pods):
                yield f"{where}: its selector matches no Deployment's pods"


def rule_errors(spec: dict[str, Any], rules: Path = RULES) -> Iterator[str]:
    """The PrometheusRule's groups begin with the repo's rule file, group for group: one source of rules."""
    expected = (yaml.safe_load(rules.read_text()) or {}).get("groups") or []
    got = (spec.get("groups") or [])[: len(expected)]
    if got != expected:
        names = [g.get("name") for g in got]
        yield f"its groups {names} are not {rules.name}'s, as the local Prometheus loads them"


def dashboard_errors(text: str, dashboard: Path = DASHBOARD) -> Iterator[str]:
    """The dashboard ConfigMap holds the generated dashboard, the file an operator imports: one source."""
    try:
        same = json.loads(text) == json.loads(dashboard.read_text())
    except ValueError as exc:
        yield f"its {dashboard.name} is not JSON: {exc}"
        return
    if not same:
        yield f"its {dashboard.name} is not {dashboard.relative_to(dashboard.parents[2])}"

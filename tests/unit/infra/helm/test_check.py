"""``make deploy-check`` end to end: the chart as shipped passes; a bad value, or a manifest the Kubernetes or
KEDA schema refuses, fails it. Uses the real helm and schemas (built and fetched once through the Go module
proxy by ``make deploy-check``, which ``make test`` runs first; from the caches afterwards)."""

from __future__ import annotations

import copy
import json
import subprocess
from typing import Any

import pytest

from infra.helm import check
from infra.helm.sources import KUBERNETES_VERSION, ensure_helm, ensure_schemas
from infra.helm.validate import Validator, load_manifests
from schemas.settings import unknown_variables

pytestmark = pytest.mark.timeout(1800)  # a cold machine builds helm first
#: A non-loopback gateway needs a token to render at all.
TOKEN = ["--set", "credentials.gatewayTokens=t"]


@pytest.fixture(scope="module")
def validator() -> Validator:
    return Validator(ensure_schemas(check.HERE / "crds"))


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return load_manifests(
        check.render(ensure_helm(), check.CHART, ["--values", str(check.CHART / "ci/full-values.yaml")])
    )


def test_shipped_chart_passes() -> None:
    assert check.check(check.CHART, []) == []


def test_every_role_has_a_deployment_and_each_consumer_a_scaled_object(rendered: list[dict[str, Any]]) -> None:
    kinds = {(m["kind"], m["metadata"]["name"]) for m in rendered}
    roles = ("executor", "verifier", "judge", "episode", "auditor", "indexer", "reward-processor", "gateway")
    assert {("Deployment", f"rs-rewardstream-{r}") for r in roles} <= kinds
    assert {("ScaledObject", f"rs-rewardstream-{r}") for r in roles if r != "gateway"} <= kinds
    assert {("PodDisruptionBudget", f"rs-rewardstream-{r}") for r in roles} <= kinds
    assert sum(kind == "KafkaTopic" for kind, _ in kinds) == 12


def test_executor_scales_on_both_its_topics_within_the_partitions(rendered: list[dict[str, Any]]) -> None:
    scaled = next(m for m in rendered if m["kind"] == "ScaledObject" and m["metadata"]["name"].endswith("executor"))
    topics = sorted(t["metadata"]["topic"] for t in scaled["spec"]["triggers"])
    assert topics == ["rs.generations", "rs.run_requests"]
    assert {t["metadata"]["consumerGroup"] for t in scaled["spec"]["triggers"]} == {"rs.executor"}
    assert scaled["spec"]["maxReplicaCount"] <= 24


def test_grace_period_covers_the_drain(rendered: list[dict[str, Any]]) -> None:
    for deployment in (m for m in rendered if m["kind"] == "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert pod["terminationGracePeriodSeconds"] > float(env["RS_WORKER_DRAIN_TIMEOUT_S"])


def test_the_same_values_pass_without_the_fault() -> None:
    """The faults below are what fails them: these values alone pass."""
    assert check.check(check.CHART, TOKEN) == []


def test_a_non_loopback_gateway_without_a_token_fails() -> None:
    problems = check.check(check.CHART, ["--set", "roles.judge.replicas=1"])
    assert any("gatewayTokens" in p for p in problems), problems


def test_a_bad_value_fails_deploy_check() -> None:
    problems = check.check(check.CHART, [*TOKEN, "--set", "roles.executor.replicas=three"])
    assert any("helm template failed" in p and "replicas" in p for p in problems), problems


def test_more_replicas_than_partitions_fails() -> None:
    problems = check.check(check.CHART, [*TOKEN, "--set", "roles.judge.autoscaling.maxReplicas=13"])
    assert any("exceeds kafka.partitions" in p for p in problems), problems


def test_a_manifest_the_kubernetes_schema_refuses_fails() -> None:
    """A value the chart's schema lets through (a NetworkPolicy peer is free-form) but Kubernetes refuses."""
    peers = json.dumps([{"podSelectr": {"matchLabels": {"app": "kafka"}}}])
    problems = check.check(check.CHART, [*TOKEN, "--set-json", f"networkPolicy.kafka.peers={peers}"])
    assert any("NetworkPolicy" in p and "podSelectr" in p for p in problems), problems


def test_validator_refuses_bad_core_and_keda_fields(validator: Validator, rendered: list[dict[str, Any]]) -> None:
    deployment = copy.deepcopy(next(m for m in rendered if m["kind"] == "Deployment"))
    assert list(validator.errors(deployment)) == []
    deployment["spec"]["replicas"] = "three"
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Never"
    errors = list(validator.errors(deployment))
    assert any("spec.replicas" in e for e in errors), errors
    assert any("imagePullPolcy" in e for e in errors), errors
    scaled = copy.deepcopy(next(m for m in rendered if m["kind"] == "ScaledObject"))
    assert list(validator.errors(scaled)) == []
    scaled["spec"]["minReplicaCount"] = "one"
    del scaled["spec"]["triggers"][0]["type"]
    errors = list(validator.errors(scaled))
    assert any("minReplicaCount" in e for e in errors), errors
    assert any("'type' is a required" in e for e in errors), errors


def test_unknown_kind_is_an_error(validator: Validator) -> None:
    errors = list(validator.errors({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}))
    assert len(errors) == 1, errors
    assert "no schema" in errors[0]


@pytest.mark.parametrize("values", ["full-values.yaml", "local-e2e-values.yaml"])
def test_every_rs_variable_the_chart_sets_is_a_setting(values: str) -> None:
    """A misspelt RS_* name would be ignored by the processes (their default used): none in any render."""
    manifests = load_manifests(check.render(ensure_helm(), check.CHART, ["--values", str(check.CHART / "ci" / values)]))
    names: set[str] = set()
    for manifest in manifests:
        if manifest["kind"] == "ConfigMap":
            names |= set(manifest["data"])
        if manifest["kind"] == "Deployment":
            names |= {e["name"] for e in manifest["spec"]["template"]["spec"]["containers"][0]["env"]}
    rs_names = {name for name in names if name.startswith("RS_")}
    assert len(rs_names) > 20
    assert unknown_variables(dict.fromkeys(rs_names, "x")) == []


def test_a_loopback_gateway_on_the_nodes_network_is_probed_on_loopback() -> None:
    """The kubelet probes the pod IP, which for a hostNetwork pod is the node's address: a gateway bound to
    127.0.0.1 there failed its probes and was restarted until the probes named loopback (seen on the local
    cluster, issue 27's e2e)."""
    values = ["--values", str(check.CHART / "ci/local-e2e-values.yaml")]
    manifests = load_manifests(check.render(ensure_helm(), check.CHART, values))
    gateway = next(m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"].endswith("gateway"))
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    probes = [container[p]["httpGet"] for p in ("startupProbe", "livenessProbe", "readinessProbe")]
    assert all(p["host"] == "127.0.0.1" and p["port"] == 18088 for p in probes)
    off_node = load_manifests(check.render(ensure_helm(), check.CHART, TOKEN))
    gateway = next(m for m in off_node if m["kind"] == "Deployment" and m["metadata"]["name"].endswith("gateway"))
    assert "host" not in gateway["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]


def test_the_reward_app_id_is_per_release_and_a_safe_kafka_name() -> None:
    """Two releases on one Kafka cluster must not share the reward processor's group and changelog."""
    for release in ("rs", "team-b"):
        proc = subprocess.run(
            [str(ensure_helm()), "template", release, str(check.CHART), "--kube-version", KUBERNETES_VERSION, *TOKEN],
            capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        deployments = [m for m in load_manifests(proc.stdout) if m["kind"] == "Deployment"]
        processor = next(m for m in deployments if m["metadata"]["name"].endswith("reward-processor"))
        assert processor["spec"]["template"]["spec"]["containers"][0]["args"][-1] == f"{release}-rewards"
    for bad in ("team/b", "a" * 228):
        problems = check.check(check.CHART, [*TOKEN, "--set", f"roles.rewardProcessor.appId={bad}"])
        assert any("helm template failed" in p and "appId" in p for p in problems), problems


def test_a_chart_owned_name_in_settings_fails() -> None:
    """One variable, one source: the value that sets it, never ``settings:`` beside it."""
    problems = check.check(check.CHART, [*TOKEN, "--set-string", "settings.RS_WORKER_REBALANCE_DRAIN_S=20"])
    assert any("invalid propertyName 'RS_WORKER_REBALANCE_DRAIN_S'" in p for p in problems), problems


def test_the_grace_period_must_outlast_a_rebalance_drain_and_the_sigterm_drain() -> None:
    """A SIGTERM can land while a revoke's drain waits: the kill must come after both drains."""
    problems = check.check(check.CHART, [*TOKEN, "--set", "rebalanceDrainSeconds=15"])
    assert any("must exceed drainSeconds + rebalanceDrainSeconds" in p for p in problems), problems
    assert check.check(check.CHART, [*TOKEN, "--set", "rebalanceDrainSeconds=14"]) == []
    manifests = load_manifests(check.render(ensure_helm(), check.CHART, [*TOKEN, "--set", "rebalanceDrainSeconds=9"]))
    settings = next(m for m in manifests if m["kind"] == "ConfigMap")["data"]
    assert settings["RS_WORKER_REBALANCE_DRAIN_S"] == "9"
    for deployment in (m for m in manifests if m["kind"] == "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        drain = int(next(e["value"] for e in pod["containers"][0]["env"] if e["name"] == "RS_WORKER_DRAIN_TIMEOUT_S"))
        assert pod["terminationGracePeriodSeconds"] > drain + 9


def test_the_task_registry_in_s3_reaches_the_pods_and_excludes_a_host_path() -> None:
    verifier = ["--set", "credentials.s3Principals.verifier.accessKey=v", "--set",
                "credentials.s3Principals.verifier.secretKey=s"]  # fmt: skip
    registry = ["--set-string", "tasks.registry=s3://rs-tasks/prod", *verifier]
    manifests = load_manifests(check.render(ensure_helm(), check.CHART, [*TOKEN, *registry]))
    assert next(m for m in manifests if m["kind"] == "ConfigMap")["data"]["RS_TASKS_REGISTRY"] == "s3://rs-tasks/prod"
    both = check.check(check.CHART, [*TOKEN, *registry, "--set-string", "tasks.hostPath=/srv/tasks"])
    assert any("two task registries" in p for p in both), both
    bad = check.check(check.CHART, [*TOKEN, "--set-string", "tasks.registry=/srv/tasks"])
    assert any("helm template failed" in p and "registry" in p for p in bad), bad


def _role(manifests: list[dict[str, Any]], kind: str, role: str) -> dict[str, Any]:
    return next(m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == f"rs-rewardstream-{role}")


def test_the_auditor_runs_the_process_backend_where_verdicts_run_on_docker(rendered: list[dict[str, Any]]) -> None:
    """full-values: verifiers on docker, so the auditor re-grades on process: the process backend's privileges
    (the executor's, had it run process), no docker socket; its group's lag on verdicts scales it; its sample
    rate is the value's; it is in the release's egress policy and has a PDB."""
    pod = _role(rendered, "Deployment", "auditor")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"] == ["worker", "auditor"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["RS_AUDIT_RATE"] == "0.05"
    assert env["RS_SANDBOX_SLOTS_DIR"] == "/run/rewardstream-slots"
    assert container["securityContext"]["privileged"] is True
    assert {v["name"] for v in pod["volumes"]} >= {"sandbox-run", "sandbox-slots"}
    assert "docker-socket" not in {v["name"] for v in pod["volumes"]}
    executor = _role(rendered, "Deployment", "executor")["spec"]["template"]["spec"]
    assert "docker-socket" in {v["name"] for v in executor["volumes"]}  # the executor runs docker here
    scaled = _role(rendered, "ScaledObject", "auditor")
    assert [(t["metadata"]["topic"], t["metadata"]["consumerGroup"]) for t in scaled["spec"]["triggers"]] == [
        ("rs.verdicts", "rs.auditor")
    ]
    assert _role(rendered, "PodDisruptionBudget", "auditor")["spec"]["maxUnavailable"] == 1
    labels = _role(rendered, "Deployment", "auditor")["spec"]["template"]["metadata"]["labels"]
    egress = next(m for m in rendered if m["kind"] == "NetworkPolicy" and m["metadata"]["name"].endswith("-egress")
                  and "judge" not in m["metadata"]["name"])  # fmt: skip
    assert all(labels.get(k) == v for k, v in egress["spec"]["podSelector"]["matchLabels"].items())
    rules = next(m for m in rendered if m["kind"] == "PrometheusRule")["spec"]["groups"]
    lag = next(g for g in rules if g["name"] == "rewardstream.lag")["rules"]
    assert any(r["alert"] == "RewardstreamLagAuditor" and '"rs.auditor"' in r["expr"] for r in lag)


def test_the_auditor_of_process_verdicts_needs_a_docker_engine() -> None:
    """Verifiers on process: the auditor's runs are docker's, and a pod has no Docker Engine of its own. Without
    sandbox.dockerHost the render says so (never an auditor that skips every audit); with one it gets the
    socket and none of the process backend's privileges."""
    problems = check.check(check.CHART, [*TOKEN, "--set", "roles.auditor.enabled=true"])
    assert any("helm template failed" in p and "sandbox.dockerHost" in p for p in problems), problems
    docker = ["--set", "roles.auditor.enabled=true", "--set", "sandbox.dockerHost=unix:///var/run/docker.sock"]
    assert check.check(check.CHART, [*TOKEN, *docker]) == []
    manifests = load_manifests(check.render(ensure_helm(), check.CHART, [*TOKEN, *docker]))
    pod = _role(manifests, "Deployment", "auditor")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {v["name"] for v in pod["volumes"]} == {"tmp", "cache", "docker-socket"}
    assert "RS_SANDBOX_SLOTS_DIR" not in {e["name"] for e in container["env"]}
    assert not any(
        m["metadata"]["name"].endswith("auditor")
        for m in load_manifests(check.render(ensure_helm(), check.CHART, TOKEN))
    )

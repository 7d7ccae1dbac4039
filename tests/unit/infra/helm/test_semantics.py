"""The cross-object rules deploy-check adds to the schemas."""

from __future__ import annotations

from typing import Any

from infra.helm.semantics import check_all


def _deployment(name: str = "rs-executor", labels: dict[str, str] | None = None) -> dict[str, Any]:
    pods = labels if labels is not None else {"app": "x"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": pods}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }


def _scaled(target: str, low: int = 1, high: int = 4) -> dict[str, Any]:
    spec = {"scaleTargetRef": {"name": target}, "minReplicaCount": low, "maxReplicaCount": high}
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "so"}, "spec": spec}


def test_consistent_objects_pass() -> None:
    pdb = {
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "p"},
        "spec": {"selector": {"matchLabels": {"app": "x"}}},
    }
    assert list(check_all([_deployment(), _scaled("rs-executor"), pdb])) == []


def test_selector_not_matching_pods() -> None:
    assert any("does not match" in e for e in check_all([_deployment(labels={"app": "y"})]))


def test_scaled_object_without_its_deployment_and_bounds_reversed() -> None:
    errors = list(check_all([_deployment(), _scaled("rs-other", low=5, high=2)]))
    assert any("no Deployment of this render" in e for e in errors)
    assert any("minReplicaCount 5 > maxReplicaCount 2" in e for e in errors)


def test_bad_names_and_labels() -> None:
    service = {"kind": "Service", "metadata": {"name": "rs.gateway"}}
    errors = list(check_all([_deployment(name="RS_Executor"), service]))
    assert any("not a DNS-1123 subdomain" in e for e in errors)
    assert any("not a DNS-1035 label" in e for e in errors)
    bad_label = _deployment(labels={"app": "x", "tier": "-bad-"})
    assert any("not a valid label value" in e for e in check_all([bad_label]))


def test_pdb_matching_nothing() -> None:
    pdb = {"kind": "PodDisruptionBudget", "metadata": {"name": "p"}, "spec": {"selector": {"matchLabels": {"a": "b"}}}}
    assert any("matches no Deployment" in e for e in check_all([_deployment(), pdb]))


def test_empty_network_policy_peer() -> None:
    def policy(peer: dict[str, Any]) -> dict[str, Any]:
        spec = {"ingress": [{"from": [peer], "ports": [{"port": 80}]}]}
        return {"kind": "NetworkPolicy", "metadata": {"name": "np"}, "spec": spec}

    assert any("an empty peer" in e for e in check_all([policy({})]))
    assert list(check_all([policy({"podSelector": {}})])) == []


def test_request_above_limit() -> None:
    deployment = _deployment()
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": "1500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1024Mi"}}
    errors = list(check_all([deployment]))
    assert len(errors) == 1, errors
    assert "cpu request 1500m exceeds its limit 1" in errors[0]
    container["resources"]["limits"]["cpu"] = 2
    assert list(check_all([deployment])) == []


def test_a_prometheus_rule_must_carry_the_repo_rules_as_they_are() -> None:
    import yaml

    from infra.helm.semantics import RULES

    groups = yaml.safe_load(RULES.read_text())["groups"]
    extra = {"name": "rewardstream.lag", "rules": []}

    def rule(spec_groups: list[dict[str, Any]]) -> dict[str, Any]:
        return {"kind": "PrometheusRule", "metadata": {"name": "rs"}, "spec": {"groups": spec_groups}}

    assert list(check_all([rule([*groups, extra])])) == []
    edited = [groups[0], {**groups[1], "rules": groups[1]["rules"][1:]}]
    [problem] = check_all([rule(edited)])
    assert "rewardstream.yml" in problem


def test_the_dashboard_config_map_must_carry_the_generated_dashboard() -> None:
    from infra.helm.semantics import DASHBOARD

    def config_map(text: str) -> dict[str, Any]:
        return {"kind": "ConfigMap", "metadata": {"name": "rs-dashboard"}, "data": {"rewardstream.json": text}}

    text = DASHBOARD.read_text()
    assert list(check_all([config_map(text.rstrip("\n"))])) == []
    [edited] = check_all([config_map(text.replace("Rewards/s by outcome", "Rewards", 1))])
    assert "is not rewardstream/dashboards/rewardstream.json" in edited
    [broken] = check_all([config_map(text[:-3])])
    assert "is not JSON" in broken


def test_a_trigger_authenticating_with_no_trigger_authentication_of_the_render() -> None:
    scaled = _scaled("rs-executor")
    scaled["spec"]["triggers"] = [{"type": "kafka", "metadata": {}, "authenticationRef": {"name": "rs-kafka-executor"}}]
    errors = list(check_all([_deployment(), scaled]))
    assert any("'rs-kafka-executor', no TriggerAuthentication" in e for e in errors), errors
    auth = {"kind": "TriggerAuthentication", "metadata": {"name": "rs-kafka-executor"}, "spec": {"secretTargetRef": []}}
    assert list(check_all([_deployment(), scaled, auth])) == []


def test_a_required_key_the_rendered_secret_lacks() -> None:
    """A role's own principal's keys are required: the Secret the chart makes must hold them (an existing
    Secret's keys are unknown offline and not checked); an optional reference may miss."""
    secret = {"kind": "Secret", "metadata": {"name": "creds"}, "stringData": {"KAFKA_SASL_USERNAME": "u"}}
    deployment = _deployment()
    deployment["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "A", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "KAFKA_SASL_PASSWORD", "optional": True}}},
        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "other", "key": "KAFKA_SASL_PASSWORD_JUDGE"}}},
    ]
    refs = [{"parameter": "username", "name": "creds", "key": "KAFKA_SASL_USERNAME"}]
    auth = {"kind": "TriggerAuthentication", "metadata": {"name": "t"}, "spec": {"secretTargetRef": refs}}
    assert list(check_all([secret, deployment, auth])) == []
    refs.append({"parameter": "password", "name": "creds", "key": "KAFKA_SASL_PASSWORD_X"})
    deployment["spec"]["template"]["spec"]["containers"][0]["env"][1]["valueFrom"]["secretKeyRef"]["name"] = "creds"
    errors = list(check_all([secret, deployment, auth]))
    assert len(errors) == 2, errors
    assert all("which does not hold it" in e for e in errors)

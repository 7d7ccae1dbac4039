"""One Kafka principal per role in the chart (issue 29): each role's Deployment and KEDA trigger read the role's own
Secret keys, a role without its own falls back to the shared pair, the principal the trigger authenticates as may
DESCRIBE what KEDA reads (``schemas.kafka_acls``), and no secret value lands in a ConfigMap. Real helm renders."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from infra.helm import acls, check
from infra.helm.semantics import check_all
from infra.helm.sources import ensure_helm
from infra.helm.validate import load_manifests
from schemas.kafka_acls import REWARDS, ROLES, acl_table, markdown_table

pytestmark = pytest.mark.timeout(1800)  # a cold machine builds helm first
Manifest = dict[str, Any]
#: The chart's roles and the key suffix of their own principal in the Secret.
SUFFIX = {
    "executor": "EXECUTOR", "verifier": "VERIFIER", "judge": "JUDGE", "episode": "EPISODE",
    "auditor": "AUDITOR", "indexer": "INDEXER", "rewardProcessor": "REWARD_PROCESSOR", "gateway": "GATEWAY",
}  # fmt: skip
KEBAB = {"rewardProcessor": "reward-processor"}
PRINCIPALS = check.CHART / "ci" / "principals-values.yaml"


def _render(*args: str) -> list[Manifest]:
    return load_manifests(check.render(ensure_helm(), check.CHART, list(args)))


def _one(manifests: list[Manifest], kind: str, role: str) -> Manifest:
    name = f"rs-rewardstream-{KEBAB.get(role, role)}"
    return next(m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name)


def _kafka_refs(deployment: Manifest) -> dict[str, dict[str, Any]]:
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env if e["name"].startswith("RS_KAFKA_SASL_")}


@pytest.fixture(scope="module")
def own() -> list[Manifest]:
    """Chart-made Secret: every role but the gateway with its own principal (ci/principals-values.yaml)."""
    return _render("--values", str(PRINCIPALS))


def test_the_chart_names_the_principals_schemas_kafka_acls_grants() -> None:
    """The usernames the chart defaults to are the ones the ACL table grants (one list, two languages)."""
    helpers = (check.CHART / "templates" / "_helpers.tpl").read_text()
    block = re.search(r'define "rs.kafkaPrincipalNames" -}}\n(.*?)\n\{\{- end', helpers, re.DOTALL)
    assert block is not None
    names = yaml.safe_load(block.group(1))
    assert set(names) == set(SUFFIX)
    assert names == {**{role: role for role in SUFFIX}, "rewardProcessor": REWARDS}
    assert set(names.values()) <= set(ROLES)


def test_each_role_reads_its_own_keys_and_the_gateway_the_shared_pair(own: list[Manifest]) -> None:
    secret = next(m for m in own if m["kind"] == "Secret")["stringData"]
    for role, suffix in SUFFIX.items():
        refs = _kafka_refs(_one(own, "Deployment", role))
        if role == "gateway":
            assert refs["RS_KAFKA_SASL_USERNAME"] == {"name": "rs-rewardstream-credentials",
                                                      "key": "KAFKA_SASL_USERNAME", "optional": True}  # fmt: skip
            assert refs["RS_KAFKA_SASL_PASSWORD"]["key"] == "KAFKA_SASL_PASSWORD"
            continue
        # required keys: a Secret without them stops the pod naming the key, never a silent anonymous client
        assert refs["RS_KAFKA_SASL_USERNAME"] == {"name": "rs-rewardstream-credentials",
                                                  "key": f"KAFKA_SASL_USERNAME_{suffix}"}  # fmt: skip
        assert refs["RS_KAFKA_SASL_PASSWORD"] == {"name": "rs-rewardstream-credentials",
                                                  "key": f"KAFKA_SASL_PASSWORD_{suffix}"}  # fmt: skip
        assert secret[f"KAFKA_SASL_PASSWORD_{suffix}"] == f"{REWARDS if role == 'rewardProcessor' else role}-secret"
    assert secret["KAFKA_SASL_USERNAME_REWARD_PROCESSOR"] == REWARDS  # the default: schemas.kafka_acls's name
    assert secret["KAFKA_SASL_USERNAME_EXECUTOR"] == "executor"
    assert secret["KAFKA_SASL_USERNAME_INDEXER"] == "indexer-prod"  # given
    assert "KAFKA_SASL_USERNAME_GATEWAY" not in secret
    assert list(check_all(own)) == []  # every required key is in the Secret, every authenticationRef resolves


def test_without_own_principals_every_role_shares_the_pair_as_before() -> None:
    manifests = _render("--set", "credentials.gatewayTokens=t", "--set", "kafka.saslMechanism=SCRAM-SHA-512")
    for role in (role for role in SUFFIX if role != "auditor"):  # off by default
        refs = _kafka_refs(_one(manifests, "Deployment", role))
        assert {r["key"] for r in refs.values()} == {"KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD"}
        assert all(r["optional"] for r in refs.values())
    auths = [m for m in manifests if m["kind"] == "TriggerAuthentication"]
    assert [a["metadata"]["name"] for a in auths] == ["rs-rewardstream-kafka"]
    scaled = [m for m in manifests if m["kind"] == "ScaledObject"]
    assert {t["authenticationRef"]["name"] for s in scaled for t in s["spec"]["triggers"]} == {"rs-rewardstream-kafka"}


def _auth_keys(manifests: list[Manifest], name: str) -> dict[str, str]:
    auth = next(m for m in manifests if m["kind"] == "TriggerAuthentication" and m["metadata"]["name"] == name)
    return {ref["parameter"]: ref["key"] for ref in auth["spec"]["secretTargetRef"]}


def _may_describe(principal: str, resource: str, name: str, app: str) -> bool:
    """Kafka: READ, WRITE, DELETE... imply DESCRIBE; a prefixed grant covers the names starting with it."""
    return any(g.principal == principal and g.resource == resource
               and (g.name == name if g.pattern == "literal" else name.startswith(g.name))
               for g in acl_table("rs.", (), app))  # fmt: skip


@pytest.mark.parametrize("values", ["principals-values.yaml", "full-values.yaml"])
def test_keda_scales_each_role_as_its_own_principal_which_may_describe_what_keda_reads(values: str) -> None:
    manifests = _render("--values", str(check.CHART / "ci" / values))
    secret = next((m["stringData"] for m in manifests if m["kind"] == "Secret"), None)
    auth_names = {m["metadata"]["name"] for m in manifests if m["kind"] == "TriggerAuthentication"}
    assert "rs-rewardstream-kafka" not in auth_names  # every scaled role has its own: no shared one left over
    for role, suffix in SUFFIX.items():
        if role == "gateway":
            continue  # not a consumer: no ScaledObject
        scaled = _one(manifests, "ScaledObject", role)
        deployment_keys = {r["key"] for r in _kafka_refs(_one(manifests, "Deployment", role)).values()}
        for trigger in scaled["spec"]["triggers"]:
            name = trigger["authenticationRef"]["name"]
            assert name == f"rs-rewardstream-kafka-{KEBAB.get(role, role)}"
            keys = _auth_keys(manifests, name)
            assert keys == {"username": f"KAFKA_SASL_USERNAME_{suffix}", "password": f"KAFKA_SASL_PASSWORD_{suffix}"}
            assert set(keys.values()) == deployment_keys
            if secret is None:  # an existing Secret: its usernames are the defaults, as the ACL table has them
                continue
            principal = secret[keys["username"]]
            if principal == "indexer-prod":
                principal = "indexer"  # a renamed principal gets the same rows under its name
            meta = trigger["metadata"]
            assert _may_describe(principal, "group", meta["consumerGroup"], "rs-rewards"), (role, meta)
            assert _may_describe(principal, "topic", meta["topic"], "rs-rewards"), (role, meta)


def test_no_secret_value_is_in_a_configmap_or_a_plain_env_value(own: list[Manifest]) -> None:
    secret = next(m for m in own if m["kind"] == "Secret")["stringData"]
    values = {v for k, v in secret.items() if "PASSWORD" in k or k == "GATEWAY_TOKENS"}
    assert len(values) == 9
    for manifest in own:
        if manifest["kind"] == "Secret":
            continue
        text = yaml.safe_dump(manifest)
        assert not [v for v in values if v in text], manifest["metadata"]["name"]


def test_an_own_principal_without_a_password_fails_the_render() -> None:
    with pytest.raises(check.RenderError, match=r"kafkaPrincipals.judge: no password"):
        _render("--set", "credentials.gatewayTokens=t", "--set", "credentials.kafkaPrincipals.judge.username=j")


def test_credentials_given_beside_an_existing_secret_fail_the_render() -> None:
    args = ["--set", "credentials.existingSecret=prod", "--set", "credentials.kafkaPrincipals.judge.password=p"]
    with pytest.raises(check.RenderError, match=r"Secret prod holds KAFKA_SASL_USERNAME_JUDGE"):
        _render(*args)


def test_an_unknown_role_is_refused_by_the_schema() -> None:
    with pytest.raises(check.RenderError, match="kafkaPrincipals"):
        _render("--set", "credentials.gatewayTokens=t", "--set", "credentials.kafkaPrincipals.trainer.password=p")


def test_the_acl_rows_of_a_release_name_its_reward_app(capsys: pytest.CaptureFixture[str]) -> None:
    assert acls.main(["--release", "prod", "--trainers", "team-a"]) == 0
    table = capsys.readouterr().out
    assert "| `User:rewards` | read | group | `prod-rewards` |" in table
    assert "| `User:rewards` | write | transactional_id | `prod-rewards-*` |" in table
    assert "| `User:team-a` | read | topic | `rs.rewards` |" in table
    assert acls.main(["--format", "kafka-acls", "--bootstrap", "k:9093", "--app-id", "x-rewards"]) == 0
    commands = capsys.readouterr().out.splitlines()
    assert len(commands) == len(acl_table("rs.", ("trainer",), "x-rewards"))
    assert (
        "kafka-acls.sh --bootstrap-server k:9093 --command-config admin.properties --add --allow-principal "
        "User:rewards --operation Write --transactional-id x-rewards- --resource-pattern-type prefixed"
    ) in commands
    assert acls.main(["--trainers", "executor"]) == 2


def test_the_acl_rows_follow_a_renamed_principal(capsys: pytest.CaptureFixture[str]) -> None:
    """A username given in credentials.kafkaPrincipals gets the rows of the principal it replaces, and only it."""
    assert acls.main(["--principal", "indexer=indexer-prod"]) == 0
    table = capsys.readouterr().out
    assert "| `User:indexer-prod` | read | group | `rs.indexer` |" in table
    assert "`User:indexer`" not in table
    assert table == markdown_table("rs.", ("trainer",), "rs-rewards").replace("User:indexer`", "User:indexer-prod`")
    assert acls.main(["--principal", "indexr=x"]) == 2
    assert acls.main(["--principal", "indexer"]) == 2
    assert acls.main(["--principal", "indexer=executor"]) == 2
    assert "expected PRINCIPAL=USERNAME" in capsys.readouterr().err

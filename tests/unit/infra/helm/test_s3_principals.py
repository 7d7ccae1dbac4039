"""One S3 identity per role in the chart: the tasks' hidden part (``rewardstream tasks policy``: the ``verifier``
policy) is read with the verifier's and the auditor's own credentials, never with the pair every role shares, and a
render that would give the shared pair that access fails instead. Real helm renders."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from infra.helm import check
from infra.helm.semantics import check_all
from infra.helm.sources import ensure_helm
from infra.helm.validate import load_manifests

pytestmark = pytest.mark.timeout(1800)  # a cold machine builds helm first
Manifest = dict[str, Any]
PRINCIPALS = check.CHART / "ci" / "principals-values.yaml"
KEBAB = {"rewardProcessor": "reward-processor"}
#: The roles that read the tasks' hidden part: they need their own identity when the registry is in S3.
HIDDEN_READERS = ("verifier", "auditor")
REGISTRY = ("--set", "tasks.registry=s3://tasks/rl", "--set", "credentials.gatewayTokens=t")


def _render(*args: str) -> list[Manifest]:
    return load_manifests(check.render(ensure_helm(), check.CHART, list(args)))


def _s3_refs(manifests: list[Manifest], role: str) -> dict[str, dict[str, Any]]:
    name = f"rs-rewardstream-{KEBAB.get(role, role)}"
    deployment = next(m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"] == name)
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env if e["name"].startswith("RS_S3_")}


def _deployed_roles(manifests: list[Manifest]) -> list[str]:
    names = {m["metadata"]["name"] for m in manifests if m["kind"] == "Deployment"}
    roles = ("executor", "verifier", "judge", "episode", "auditor", "indexer", "rewardProcessor", "gateway")
    return [r for r in roles if f"rs-rewardstream-{KEBAB.get(r, r)}" in names]


def test_the_hidden_readers_use_their_own_identity_and_every_other_role_the_shared_one() -> None:
    manifests = _render("--values", str(PRINCIPALS))
    secret = next(m for m in manifests if m["kind"] == "Secret")["stringData"]
    roles = _deployed_roles(manifests)
    assert set(HIDDEN_READERS) <= set(roles)
    for role in roles:
        refs = _s3_refs(manifests, role)
        if role in HIDDEN_READERS:
            suffix = role.upper()
            # required keys: a Secret without them stops the pod naming the key, never the shared pair instead
            assert refs["RS_S3_ACCESS_KEY"] == {"name": "rs-rewardstream-credentials", "key": f"S3_ACCESS_KEY_{suffix}"}
            assert refs["RS_S3_SECRET_KEY"] == {"name": "rs-rewardstream-credentials", "key": f"S3_SECRET_KEY_{suffix}"}
            assert secret[f"S3_SECRET_KEY_{suffix}"] == "verifier-s3-secret"
        else:
            assert {r["key"] for r in refs.values()} == {"S3_ACCESS_KEY", "S3_SECRET_KEY"}, role
            assert all(r["optional"] for r in refs.values()), role
    assert (secret["S3_ACCESS_KEY"], secret["S3_SECRET_KEY"]) == ("worker-key", "worker-secret")
    assert list(check_all(manifests)) == []  # every required key is in the Secret
    for manifest in manifests:  # the secret values stay in the Secret
        if manifest["kind"] != "Secret":
            assert "verifier-s3-secret" not in yaml.safe_dump(manifest), manifest["metadata"]["name"]


def test_without_own_identities_and_no_s3_registry_every_role_shares_the_pair_as_before() -> None:
    manifests = _render("--set", "credentials.gatewayTokens=t", "--set", "credentials.s3AccessKey=k")
    for role in _deployed_roles(manifests):
        refs = _s3_refs(manifests, role)
        assert {r["key"] for r in refs.values()} == {"S3_ACCESS_KEY", "S3_SECRET_KEY"}, role
        assert all(r["optional"] for r in refs.values()), role


def test_an_s3_registry_without_the_verifiers_own_identity_fails_the_render() -> None:
    with pytest.raises(check.RenderError, match=r"give it its own S3 identity in credentials.s3Principals.verifier"):
        _render(*REGISTRY)


def test_an_enabled_auditor_needs_its_own_identity_too() -> None:
    args = [*REGISTRY, "--set", "sandbox.backend=docker", "--set", "sandbox.dockerHost=unix:///var/run/docker.sock"]
    own_verifier = ["--set", "credentials.s3Principals.verifier.accessKey=v", "--set",
                    "credentials.s3Principals.verifier.secretKey=s"]  # fmt: skip
    assert _render(*args, *own_verifier)  # the auditor is off by default
    with pytest.raises(check.RenderError, match=r"credentials.s3Principals.auditor"):
        _render(*args, *own_verifier, "--set", "roles.auditor.enabled=true")


def test_an_identity_missing_its_secret_key_fails_the_render() -> None:
    with pytest.raises(check.RenderError, match=r"s3Principals.verifier: needs accessKey and secretKey"):
        _render(*REGISTRY, "--set", "credentials.s3Principals.verifier.accessKey=v")


def test_with_an_existing_secret_the_identity_is_read_from_it_and_never_given_here() -> None:
    existing = ["--set", "credentials.existingSecret=prod", "--set", "tasks.registry=s3://tasks/rl"]
    manifests = _render(*existing, "--set-json", "credentials.s3Principals.verifier={}")
    assert not [m for m in manifests if m["kind"] == "Secret"]  # the chart makes none
    assert _s3_refs(manifests, "verifier")["RS_S3_ACCESS_KEY"] == {"name": "prod", "key": "S3_ACCESS_KEY_VERIFIER"}
    with pytest.raises(check.RenderError, match=r"Secret prod holds S3_ACCESS_KEY_VERIFIER"):
        _render(*existing, "--set", "credentials.s3Principals.verifier.secretKey=s")


def test_an_unknown_role_is_refused_by_the_schema() -> None:
    with pytest.raises(check.RenderError, match="s3Principals"):
        _render("--set", "credentials.gatewayTokens=t", "--set", "credentials.s3Principals.trainer.accessKey=k")

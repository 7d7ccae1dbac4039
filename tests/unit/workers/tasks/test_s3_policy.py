"""The S3 registry's policies: the loader writes its prefix, workers read public/ only, verifiers both parts."""

from __future__ import annotations

from typing import Any

from schemas.registry_s3 import RegistryLocation
from workers.tasks.s3_policy import PRINCIPALS, registry_policies


def resources(policy: dict[str, Any], effect: str, action: str) -> list[str]:
    return [
        resource
        for statement in policy["Statement"]
        if statement["Effect"] == effect and action in statement["Action"]
        for resource in statement["Resource"]
    ]


def test_workers_read_only_the_public_part() -> None:
    policies = registry_policies(RegistryLocation.parse("s3://tasks/reg"))
    assert set(policies) == set(PRINCIPALS)
    worker = policies["worker"]
    assert resources(worker, "Allow", "s3:GetObject") == ["arn:aws:s3:::tasks/reg/public/*"]
    assert resources(worker, "Deny", "s3:GetObject") == ["arn:aws:s3:::tasks/reg/hidden/*"]
    assert resources(worker, "Allow", "s3:PutObject") == []
    listing = next(s for s in worker["Statement"] if "s3:ListBucket" in s["Action"])
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["reg/public/*"]}}


def test_verifiers_read_both_parts_and_write_nothing() -> None:
    verifier = registry_policies(RegistryLocation.parse("s3://tasks/reg"))["verifier"]
    assert resources(verifier, "Allow", "s3:GetObject") == [
        "arn:aws:s3:::tasks/reg/public/*",
        "arn:aws:s3:::tasks/reg/hidden/*",
    ]
    assert resources(verifier, "Allow", "s3:PutObject") == []
    assert resources(verifier, "Deny", "s3:GetObject") == []


def test_the_loader_writes_the_whole_prefix() -> None:
    loader = registry_policies(RegistryLocation.parse("s3://tasks/reg"))["loader"]
    for action in ("s3:GetObject", "s3:PutObject"):
        assert resources(loader, "Allow", action) == ["arn:aws:s3:::tasks/reg/*"]


def test_a_registry_at_the_bucket_root() -> None:
    policies = registry_policies(RegistryLocation.parse("s3://tasks"))
    assert resources(policies["loader"], "Allow", "s3:PutObject") == ["arn:aws:s3:::tasks/*"]
    assert "Condition" not in policies["loader"]["Statement"][0]
    assert resources(policies["worker"], "Allow", "s3:GetObject") == ["arn:aws:s3:::tasks/public/*"]

"""The bucket policies of an S3 task registry: who may write it, who may read its public part, who its hidden one.

Three principals (IAM-style policy documents, as AWS IAM and MinIO take them):

* ``loader``: the trainer or operator who runs ``rewardstream tasks load``: lists, reads and writes everything
  under the registry's prefix (it reads pointers and histories to tell what changed).
* ``worker``: executors, judges, episode workers, the gateway, the trainer's SDK: lists and reads
  ``<prefix>/public/`` and nothing else; an explicit Deny on ``<prefix>/hidden/`` keeps it so even when another
  policy attached to the same principal grants more of the bucket.
* ``verifier``: reads ``<prefix>/public/`` and ``<prefix>/hidden/`` (the hidden tests it grades with).

Why a worker must never read the hidden part: a policy that could read the hidden cases could leak them to the
trainer (its feedback, its logs), and a reward built on cases the policy has seen rewards memorising them.
``rewardstream tasks policy --registry s3://...`` prints these documents; ``tests/integration/
test_task_registry_policy.py`` applies them on a real MinIO and checks each principal's access.
"""

from __future__ import annotations

from typing import Any

from schemas.registry_s3 import RegistryLocation

PRINCIPALS = ("loader", "worker", "verifier")


def registry_policies(location: RegistryLocation) -> dict[str, dict[str, Any]]:
    """Principal name -> its policy document for the registry at ``location``."""
    public = location.part_prefix(hidden=False)
    hidden = location.part_prefix(hidden=True)
    everything = location.key("") if location.prefix else ""
    return {
        "loader": _policy(
            _list(location.bucket, [everything]),
            _allow(location.bucket, ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"], [everything]),
        ),
        "worker": _policy(
            _list(location.bucket, [public]),
            _allow(location.bucket, ["s3:GetObject"], [public]),
            {
                "Sid": "NoHiddenTests",
                "Effect": "Deny",
                "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                "Resource": [f"arn:aws:s3:::{location.bucket}/{hidden}*"],
            },
        ),
        "verifier": _policy(
            _list(location.bucket, [public, hidden]),
            _allow(location.bucket, ["s3:GetObject"], [public, hidden]),
        ),
    }


def _policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def _list(bucket: str, prefixes: list[str]) -> dict[str, Any]:
    """Listing the bucket, only under ``prefixes`` (``""``: the whole bucket)."""
    statement: dict[str, Any] = {
        "Sid": "List",
        "Effect": "Allow",
        "Action": ["s3:ListBucket"],
        "Resource": [f"arn:aws:s3:::{bucket}"],
    }
    if any(prefixes):
        statement["Condition"] = {"StringLike": {"s3:prefix": [f"{prefix}*" for prefix in prefixes]}}
    return statement


def _allow(bucket: str, actions: list[str], prefixes: list[str]) -> dict[str, Any]:
    return {
        "Sid": "Objects",
        "Effect": "Allow",
        "Action": actions,
        "Resource": [f"arn:aws:s3:::{bucket}/{prefix}*" for prefix in prefixes],
    }

"""Content addresses in S3: the one key layout every producer and reader of the artifact store agrees on.

Why in the contracts: a claim check (a write's content, a generation's code, a workspace snapshot) names an
object by the sha256 of its bytes. The SDK that uploads and the worker that reads must make the same key, and
a worker reads only that key for a digest, so a ref can never make it read any other object.
"""

from __future__ import annotations

#: The first segment of every content-addressed key.
KEY_PREFIX = "sha256"


def content_key(sha256_hex: str) -> str:
    """Object key of content with this digest (two-char fan-out keeps listings manageable)."""
    return f"{KEY_PREFIX}/{sha256_hex[:2]}/{sha256_hex}"


def content_url(bucket: str, sha256_hex: str) -> str:
    """The ``s3://`` URL content with this digest has (or would have) in ``bucket``."""
    return f"s3://{bucket}/{content_key(sha256_hex)}"


#: The id of the lifecycle rule rewardstream owns in the artifacts bucket (rules with other ids are left alone).
EXPIRY_RULE_ID = "rewardstream-content-expiry"
_DAY_S = 86_400.0


def refresh_after_s(expiry_days: int) -> float:
    """How old an existing content object may be when a writer skips uploading it again: half the expiry.

    Why: content addressing lets a writer skip an upload when the object exists, so a new event can reference an
    object written weeks ago. An object older than this is copied onto itself (its age reset) before the new
    reference is handed out, so whatever references it has at least half the expiry left. 0 days: no expiry,
    never refreshed."""
    return expiry_days * _DAY_S / 2 if expiry_days > 0 else float("inf")

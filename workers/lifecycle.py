"""The artifacts bucket's lifecycle: which prefixes expire, installed idempotently where the bucket is made.

Which prefixes may expire, and why (docs/operations.md, "S3 lifecycle"):
- ``sha256/`` (``schemas.content``) holds everything the pipeline writes: generations' code (``code_ref``), run
  outputs and per-case results, workspace snapshots (of running episodes too), transcripts, the SDK's claim
  checks. Its readers are events (topics keep them 1 to 30 days) and live episode states. It expires after
  ``RS_S3_ARTIFACT_EXPIRY_DAYS``: safe because every writer that skips an upload (the object exists) refreshes
  an object older than half that (``ArtifactStore``, ``streams/sdk/claims.py``), so a new reference always has
  at least half the expiry left.
- Everything else never expires, by having no rule: the task registry (``s3://bucket/prefix``: ``public/``,
  ``hidden/``, even in this bucket), task workspace archives (keys their authors chose) and any other key.
The one rule is rewardstream's by its id; rules with other ids in the bucket are kept as they are.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from schemas.content import EXPIRY_RULE_ID, KEY_PREFIX
from schemas.errors import exception_line

if TYPE_CHECKING:
    from schemas.settings import Settings

log = logging.getLogger(__name__)

State = Literal["installed", "unchanged", "removed", "absent", "unsupported", "denied"]
#: What an S3 service answers when it has no lifecycle API (s3proxy, the local S3, says NotImplemented).
_UNSUPPORTED = frozenset({"NotImplemented", "XNotImplemented", "MethodNotAllowed"})
_DENIED = frozenset({"AccessDenied"})


@dataclass(frozen=True)
class LifecycleOutcome:
    """What ``ensure_lifecycle`` found or did, and one line saying so."""

    state: State
    detail: str

    @property
    def ok(self) -> bool:
        """Whether the bucket now has the lifecycle the settings ask for."""
        return self.state in ("installed", "unchanged", "removed", "absent")


def expiry_rule(days: int) -> Any:
    """rewardstream's rule: objects under ``sha256/`` expire ``days`` after their last write."""
    from minio.commonconfig import ENABLED, Filter
    from minio.lifecycleconfig import Expiration, Rule

    return Rule(ENABLED, rule_filter=Filter(prefix=f"{KEY_PREFIX}/"), rule_id=EXPIRY_RULE_ID,
                expiration=Expiration(days=days))  # fmt: skip


def _is_ours_with(rule: Any, days: int) -> bool:
    from minio.commonconfig import ENABLED

    expiration = rule.expiration
    prefix = rule.rule_filter.prefix if rule.rule_filter is not None else None
    return (
        rule.status == ENABLED
        and prefix == f"{KEY_PREFIX}/"
        and expiration is not None
        and expiration.days == days
        and rule.noncurrent_version_expiration is None
        and rule.transition is None
    )


def ensure_lifecycle(client: Any, bucket: str, expiry_days: int) -> LifecycleOutcome:
    """Make the bucket's rewardstream rule match ``expiry_days`` (0: no rule), leaving other rules alone.
    Idempotent: nothing is written when the rule is already right. An S3 without a lifecycle API, or
    credentials that may not set one, is an outcome that says so, never an exception."""
    from minio.error import S3Error
    from minio.lifecycleconfig import LifecycleConfig

    where = f"s3://{bucket}/{KEY_PREFIX}/"
    try:
        current = client.get_bucket_lifecycle(bucket)
        rules = list(current.rules) if current is not None else []
        others = [rule for rule in rules if rule.rule_id != EXPIRY_RULE_ID]
        ours = [rule for rule in rules if rule.rule_id == EXPIRY_RULE_ID]
        if expiry_days <= 0:
            if not ours:
                return LifecycleOutcome("absent", f"{where}: no expiry (RS_S3_ARTIFACT_EXPIRY_DAYS=0)")
            if others:
                client.set_bucket_lifecycle(bucket, LifecycleConfig(others))
            else:
                client.delete_bucket_lifecycle(bucket)
            return LifecycleOutcome("removed", f"{where}: expiry rule removed (RS_S3_ARTIFACT_EXPIRY_DAYS=0)")
        if len(ours) == 1 and _is_ours_with(ours[0], expiry_days):
            return LifecycleOutcome("unchanged", f"{where}: objects expire after {expiry_days} days (already set)")
        client.set_bucket_lifecycle(bucket, LifecycleConfig([*others, expiry_rule(expiry_days)]))
        return LifecycleOutcome("installed", f"{where}: objects expire after {expiry_days} days (rule set)")
    except S3Error as exc:
        if exc.code in _UNSUPPORTED:
            return LifecycleOutcome(
                "unsupported",
                f"{where}: this S3 has no lifecycle API ({exc.code}; s3proxy, the local S3, has none): "
                "artifacts never expire here",
            )
        if exc.code in _DENIED:
            return LifecycleOutcome(
                "denied",
                f"{where}: these credentials may not read or set the bucket's lifecycle ({exc.code}): "
                "set it with an admin's, or artifacts never expire",
            )
        raise


def artifact_lifecycle(settings: Settings) -> LifecycleOutcome:
    """What ``up`` does: the artifacts bucket made if missing (retried for a while) and its rule ensured.
    ArtifactError if S3 stays down; an S3 refusal other than "unsupported"/"denied" raises minio's S3Error."""
    from workers.artifacts import ArtifactStore, minio_client

    client = minio_client(settings)
    ArtifactStore(client, settings.s3.bucket).start()
    return ensure_lifecycle(client, settings.s3.bucket, settings.s3.artifact_expiry_days)


def ensure_on_start(client: Any, bucket: str, expiry_days: int) -> LifecycleOutcome | None:
    """A worker's start: the rule installed beside the bucket; a failure is logged, never fatal (the
    worker's job is grading; the rule can wait for the next start or ``up``)."""
    try:
        outcome = ensure_lifecycle(client, bucket, expiry_days)
    except Exception as exc:
        log.warning("S3 lifecycle of %s not checked: %s", bucket, exception_line(exc))
        return None
    (log.info if outcome.ok else log.warning)("S3 lifecycle: %s", outcome.detail)
    return outcome

"""Actions too large for one message, on the trainer's side: never an exception for what the agent wrote.

Why: a message is capped (``MAX_MESSAGE_BYTES``), an agent's write is not. A write that does not fit goes by
claim check: its bytes are uploaded to S3 under their sha256 (``schemas.content``, the bucket the episode
worker reads) and the event carries ``content`` (ref, sha256, size) instead of ``text``/``base64``. The worker
then decides with the task's ``workspace_max_mb``, so the answer (applied, or ``rejected`` with the reason) is
in the episode's log like any other. The SDK uploads only what the worker could apply: a write the worker
will reject without reading its bytes (a bad path, over ``MAX_WRITE_BYTES``) goes as a claim of bytes never
uploaded. An action that cannot travel even so (a command or path of megabytes, a write with both text and
base64 or content that does not decode; any text holding a lone surrogate, which is not UTF-8) is rejected
here, with the reason ``action_problem`` gives (the worker's words): it is answered at once and uses no turn,
as a reply that is not an action at all.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic_core import PydanticSerializationError

from schemas.codec import EncodeError, encode
from schemas.content import content_key, content_url, refresh_after_s
from schemas.episodes import (
    ActionEvent,
    ContentClaim,
    EventWriteAction,
    ObservationEvent,
    WriteAction,
    action_problem,
    claim_of,
    write_size,
)
from schemas.settings import S3Settings
from schemas.status import REJECTED
from streams.sdk.config import SdkError


class ContentUploadError(SdkError):
    """A write's content could not be stored in S3 (an outage, a missing bucket): the trainer's to fix."""


@dataclass(frozen=True)
class Inline:
    """The event fits one message as it is."""

    event: ActionEvent


@dataclass(frozen=True)
class Claim:
    """A write whose bytes (``data``) must go by claim check."""

    event: ActionEvent
    data: bytes


@dataclass(frozen=True)
class Withheld:
    """An action that cannot travel: ``reason`` is the rejection the agent gets; nothing is sent."""

    event: ActionEvent
    reason: str


Outgoing = Inline | Claim | Withheld


def route(event: ActionEvent) -> Outgoing:
    """How ``event`` goes out: inline when it fits one message, a write's bytes by claim check, else withheld."""
    try:
        encode(event)
    except (EncodeError, PydanticSerializationError) as exc:  # too large; or a lone surrogate (not UTF-8)
        too_big = str(exc)
    else:
        return Inline(event)
    action = event.action
    if isinstance(action, WriteAction) and _claimable(action):
        return Claim(event, action.data())
    return Withheld(event, action_problem(action) or too_big)


def _claimable(action: WriteAction) -> bool:
    """Whether the write's bytes are known: inline, one form only, decodable."""
    both = action.text is not None and action.base64 is not None
    return claim_of(action) is None and not both and write_size(action) is not None


def claimed_event(event: ActionEvent, path: str, content: ContentClaim) -> ActionEvent:
    """``event`` with its write's bytes replaced by ``content`` (same event id, episode and turn)."""
    return event.model_copy(update={"action": EventWriteAction(action="write", path=path, content=content)})


def unsendable(claim: Claim) -> Withheld:
    """A claim a client without S3 cannot send."""
    why = f"a write of {len(claim.data)} bytes does not fit one message and this client has no S3 store to send it by"
    return Withheld(claim.event, f"{why} (EpisodeConfig.s3)")


def withheld_observation(withheld: Withheld) -> ObservationEvent:
    """The ``rejected`` answer to an action that was not sent (its turn is not used: the next action takes it)."""
    event = withheld.event
    return ObservationEvent.build(
        episode_id=event.episode_id, turn=event.turn, action=event.action.action, status=REJECTED,
        reason=f"{withheld.reason} (not sent: the action does not fit one message; no turn was used)",
    )  # fmt: skip


class ContentStore:
    """Uploads writes' bytes, content-addressed, to the episode worker's bucket; thread-safe (minio's client
    is, and retries a failing request with backoff itself)."""

    def __init__(self, client: Any, bucket: str, *, refresh_after_s: float = float("inf")) -> None:
        self._client = client
        self.bucket = bucket
        self.refresh_after_s = refresh_after_s

    @classmethod
    def from_settings(cls, s3: S3Settings) -> ContentStore:
        """A store on the S3 of the settings (the same bucket the workers use)."""
        from minio import Minio  # imported on first use: most clients never send a large write

        client = Minio(s3.endpoint, access_key=s3.access_key, secret_key=s3.secret_key.get_secret_value(),
                       secure=s3.secure, region=s3.region)  # fmt: skip
        return cls(client, s3.bucket, refresh_after_s=refresh_after_s(s3.artifact_expiry_days))

    def claimed(self, claim: Claim) -> Inline | Withheld:
        """``claim``'s event with its bytes in S3 (uploaded only when the worker could write them)."""
        action = claim.event.action
        if not isinstance(action, WriteAction):  # route claims writes only
            return Withheld(claim.event, f"a {action.action} has no content to send by claim check")
        sha = hashlib.sha256(claim.data).hexdigest()
        content = ContentClaim(ref=content_url(self.bucket, sha), sha256=sha, size=len(claim.data))
        event = claimed_event(claim.event, action.path, content)
        problem = action_problem(event.action)
        try:
            encode(event)
        except (EncodeError, PydanticSerializationError) as exc:
            return Withheld(claim.event, problem or str(exc))
        if problem is None:  # else the worker rejects it before reading a byte: nothing to upload
            self.put(sha, claim.data)
        return Inline(event)

    def put(self, sha256_hex: str, data: bytes) -> None:
        """Store ``data`` under its content address (skipped when S3 has it already)."""
        from minio.error import MinioException, S3Error
        from urllib3.exceptions import HTTPError

        key = content_key(sha256_hex)
        try:
            try:
                stat = self._client.stat_object(self.bucket, key)
            except S3Error as exc:
                if exc.code not in ("NoSuchKey", "NoSuchObject", "ResourceNotFound"):
                    raise
            else:
                if _age_s(stat) >= self.refresh_after_s:
                    self._refresh(key, sha256_hex, getattr(stat, "content_type", None))
                return
            self._client.put_object(self.bucket, key, io.BytesIO(data), len(data), metadata={"sha256": sha256_hex})
        except (MinioException, HTTPError, OSError) as exc:
            where = f"s3://{self.bucket}/{key}"
            raise ContentUploadError(f"cannot store a write's {len(data)} bytes at {where}: {exc}") from exc

    def _refresh(self, key: str, sha256_hex: str, content_type: str | None) -> None:
        """Copy an old object onto itself before referencing it again: the bucket's expiry counts from now
        (``schemas.content.refresh_after_s``)."""
        from minio.commonconfig import REPLACE, CopySource

        metadata = {"sha256": sha256_hex, "Content-Type": content_type or "application/octet-stream"}
        self._client.copy_object(
            self.bucket, key, CopySource(self.bucket, key), metadata=metadata, metadata_directive=REPLACE
        )


def _age_s(stat: object) -> float:
    """Seconds since S3 last wrote the object (0 when it did not say)."""
    modified: datetime | None = getattr(stat, "last_modified", None)
    return 0.0 if modified is None else (datetime.now(UTC) - modified).total_seconds()

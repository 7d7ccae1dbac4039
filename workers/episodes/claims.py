"""A write's bytes sent by claim check: read from S3 by the episode worker, or the reason the write is rejected.

Why these rules: the claim is the trainer's, its bytes the agent's. The worker reads only the content address
of the claim's sha256 in its own bucket (a ref can never make it read any other object, another bucket's or a
snapshot by another name), no more than the size the claim declares (checked against the task's cap before
this is called), and the store checks the bytes against the key. What is missing, foreign, larger or not what
the claim says is the action's problem: a ``rejected`` observation with the reason. An S3 outage is the
infrastructure's: ``ArtifactError(outage=True)`` raises through, and the loop retries the action.
"""

from __future__ import annotations

from typing import Protocol

from schemas.episodes import ContentClaim
from workers.artifacts import ArtifactError


class ContentReader(Protocol):
    """What of ``workers.artifacts.ArtifactStore`` reading a claim uses."""

    def get(self, url: str, *, max_bytes: int | None = None) -> bytes: ...

    def url_for(self, sha256_hex: str) -> str: ...


def claimed_bytes(store: ContentReader, claim: ContentClaim) -> bytes | str:
    """The bytes ``claim`` names, or why the write that carries it is rejected."""
    if claim.ref != store.url_for(claim.sha256):
        return f"content.ref {claim.ref} is not the content address of content.sha256 in the episode worker's store"
    try:
        data = store.get(claim.ref, max_bytes=claim.size)
    except ArtifactError as exc:
        if exc.outage:
            raise
        return f"the write's content cannot be read: {exc}"
    if len(data) != claim.size:
        return f"the write's content is {len(data)} bytes, not the {claim.size} bytes its claim says"
    return data

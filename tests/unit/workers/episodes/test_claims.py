"""A write whose bytes come by claim check, on the episode worker's side: the rules (pure), the read of the
claim (a dict for S3) and the handler's answer (a scripted sandbox). The real S3 and worker are
tests/integration/test_episode_big_writes.py's."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from schemas.episodes import ActionEvent, ContentClaim
from tests.unit.workers.episodes.test_handler import Harness, observations, open_body
from tests.unit.workers.episodes.test_turns import LIMITS, STATE
from tests.unit.workers.episodes.test_workspaces import DictStore
from workers.artifacts import ArtifactError
from workers.episodes.claims import claimed_bytes
from workers.episodes.step import StepAction
from workers.episodes.transcript import detail
from workers.episodes.turns import ClaimedWrite, Rejected, Step, decide, step_action
from workers.handler import InfrastructureError

MIB = 1 << 20


def _claim(store: DictStore, data: bytes, *, size: int | None = None, ref: str | None = None) -> dict[str, Any]:
    """The claim check of ``data`` (stored in ``store``), its size or ref changed when given."""
    sha = hashlib.sha256(data).hexdigest()
    return {"ref": ref or store.url_for(sha), "sha256": sha, "size": len(data) if size is None else size}


def _write(turn: int, path: str, claim: dict[str, Any]) -> ActionEvent:
    return ActionEvent.model_validate(
        {"episode_id": "ep-1", "turn": turn, "action": {"action": "write", "path": path, "content": claim}}
    )


# ---- the rules ---------------------------------------------------------------------------------------------


def test_a_claimed_write_within_the_workspace_cap_is_read_then_written() -> None:
    claim = _claim(DictStore(), b"x" * 10)
    decision = decide(STATE, _write(3, "big.txt", claim), LIMITS, 1020.0)
    assert decision == ClaimedWrite("big.txt", ContentClaim.model_validate(claim))
    with pytest.raises(ValueError, match="read by the handler"):
        step_action(_write(3, "big.txt", claim).action, LIMITS)  # type: ignore[arg-type]


@pytest.mark.parametrize("claimed", [True, False], ids=["claim", "inline"])
def test_a_write_over_the_tasks_workspace_cap_is_the_agents_rejection_and_uses_its_turn(claimed: bool) -> None:
    limits = LIMITS.model_copy(update={"workspace_max_mb": 1})
    if claimed:
        event = _write(3, "big.txt", _claim(DictStore(), b"", size=MIB + 1))
    else:
        inline = {"action": "write", "path": "big.txt", "text": "x" * (MIB + 1)}
        event = ActionEvent.model_validate({"episode_id": "ep-1", "turn": 3, "action": inline})
    decision = decide(STATE, event, limits, 1020.0)
    assert decision == Rejected(
        f"write of {MIB + 1} bytes is over the workspace cap ({MIB} bytes: the task's episode.workspace_max_mb is 1)",
        consumes_turn=True,
    )
    at_cap = _write(3, "big.txt", _claim(DictStore(), b"", size=MIB))
    assert isinstance(decide(STATE, at_cap, limits, 1020.0), ClaimedWrite)


def test_a_claimed_write_with_a_bad_path_is_rejected_before_anything_is_read() -> None:
    decision = decide(STATE, _write(3, "../escape", _claim(DictStore(), b"x")), LIMITS, 1020.0)
    assert decision == Rejected("path has a '..' segment (it would leave the workspace)", consumes_turn=True)


# ---- reading the claim ---------------------------------------------------------------------------------------


def test_the_claimed_bytes_are_read_from_our_content_address_no_more_than_the_claim_says() -> None:
    store = DictStore()
    data = b"hello\n" * 100
    store.put(data)
    assert claimed_bytes(store, ContentClaim.model_validate(_claim(store, data))) == data
    larger = claimed_bytes(store, ContentClaim.model_validate(_claim(store, data, size=10)))
    assert larger == f"the write's content cannot be read: artifact {store.url_for(_claim(store, data)['sha256'])} " \
                     "is larger than 10 bytes"  # fmt: skip
    smaller = claimed_bytes(store, ContentClaim.model_validate(_claim(store, data, size=len(data) + 1)))
    assert smaller == f"the write's content is {len(data)} bytes, not the {len(data) + 1} bytes its claim says"


@pytest.mark.parametrize(
    "ref",
    [
        "s3://other-bucket/sha256/{sha}",  # another bucket
        "s3://bucket/sha256/{other}",  # our bucket, another object (e.g. a snapshot)
        "s3://bucket/tasks/{sha}.tar",  # not a content address
    ],
)
def test_a_claim_that_is_not_the_content_address_of_its_sha256_is_refused_unread(ref: str) -> None:
    store = DictStore()
    data, other = b"mine", b"someone else's snapshot"
    store.put(data)
    store.put(other)
    sha = hashlib.sha256(data).hexdigest()
    claim = _claim(store, data, ref=ref.format(sha=sha, other=hashlib.sha256(other).hexdigest()))
    reason = claimed_bytes(store, ContentClaim.model_validate(claim))
    assert isinstance(reason, str)
    assert reason.endswith("is not the content address of content.sha256 in the episode worker's store"), reason


def test_a_missing_object_is_the_agents_and_an_outage_is_the_infrastructures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = DictStore()
    claim = ContentClaim.model_validate(_claim(store, b"never uploaded"))
    assert claimed_bytes(store, claim) == f"the write's content cannot be read: no such artifact {claim.ref}"

    def outage(url: str, *, max_bytes: int | None = None) -> bytes:
        raise ArtifactError("S3 unreachable (stopping)", outage=True)

    monkeypatch.setattr(store, "get", outage)
    with pytest.raises(ArtifactError, match="unreachable"):
        claimed_bytes(store, claim)


# ---- the handler ---------------------------------------------------------------------------------------------


def test_the_handler_writes_a_claimed_write_and_rejects_a_bad_claim_using_its_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = Harness(tmp_path, monkeypatch)
    box.act("e", 0, open_body())
    data = b"big file\n" * 1000
    box.store.put(data)
    good = {"action": "write", "path": "data/big.txt", "content": _claim(box.store, data)}
    (written,) = observations(box.act("e", 1, good).outputs)
    assert (written.turn, written.action, written.status) == (1, "write", "ok"), written
    assert box.steps[-1] == StepAction.write("data/big.txt", data)

    steps = len(box.steps)
    foreign = {**good, "content": _claim(box.store, data, ref="s3://elsewhere/sha256/" + "0" * 64)}
    (refused,) = observations(box.act("e", 2, foreign).outputs)
    assert (refused.turn, refused.status) == (2, "rejected"), refused
    assert "is not the content address" in (refused.reason or "")
    over = {**good, "content": _claim(box.store, data, size=(64 << 20) + 1)}  # the task's cap is 64 MiB
    (too_big,) = observations(box.act("e", 3, over).outputs)
    assert (too_big.turn, too_big.status) == (3, "rejected"), too_big
    assert "over the workspace cap" in (too_big.reason or "")
    assert len(box.steps) == steps  # no sandbox run for either
    (after,) = observations(box.act("e", 4, {"action": "exec", "command": "true"}).outputs)
    assert (after.turn, after.status) == (4, "ok")  # the episode goes on


def test_an_outage_reading_a_claim_is_retried_and_the_agent_sees_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = Harness(tmp_path, monkeypatch)
    box.act("e", 0, open_body())
    data = b"payload"
    box.store.put(data)
    real_get = box.store.get

    def outage(url: str, *, max_bytes: int | None = None) -> bytes:
        raise ArtifactError("S3 unreachable (stopping)", outage=True)

    monkeypatch.setattr(box.store, "get", outage)
    body = {"action": "write", "path": "p.txt", "content": _claim(box.store, data)}
    with pytest.raises(InfrastructureError, match="reading its write's content: S3 unreachable"):
        box.act("e", 1, body)
    monkeypatch.setattr(box.store, "get", real_get)
    (obs,) = observations(box.act("e", 1, body).outputs)
    assert (obs.turn, obs.status) == (1, "ok")
    assert box.steps[-1] == StepAction.write("p.txt", data)


def test_a_step_of_an_inline_write_is_unchanged() -> None:
    event = ActionEvent.model_validate(
        {"episode_id": "ep-1", "turn": 3, "action": {"action": "write", "path": "a.txt", "text": "x"}}
    )
    assert decide(STATE, event, LIMITS, 1020.0) == Step(StepAction.write("a.txt", b"x"))


def test_a_claimed_writes_transcript_line_names_its_size_never_its_bytes() -> None:
    event = _write(3, "data/big.txt", _claim(DictStore(), b"x" * 2048))
    assert detail(event) == "data/big.txt (2048 bytes by claim check)"

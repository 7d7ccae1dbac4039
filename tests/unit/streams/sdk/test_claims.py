"""Actions too large for one message, on the trainer's side: a write's bytes by claim check, uploaded only when
the worker could write them; an action that cannot travel answered ``rejected`` here without using a turn;
never an exception for what the agent wrote. A dict stands in for S3 (the real one:
tests/integration/test_episode_big_writes.py)."""

from __future__ import annotations

import base64
import hashlib
from concurrent.futures import Future
from typing import Any

import pytest
import urllib3.exceptions
from minio.error import S3Error

from schemas import episodes as episode_schemas
from schemas.codec import MAX_MESSAGE_BYTES, encode
from schemas.content import content_key, content_url
from schemas.episodes import ActionEvent, ObservationEvent, claim_of
from schemas.status import SandboxStatus
from streams.sdk.claims import (
    Claim,
    ContentStore,
    ContentUploadError,
    Inline,
    Withheld,
    route,
    withheld_observation,
)
from streams.sdk.episodes import Episode

BIG = MAX_MESSAGE_BYTES + 1


class DictS3:
    """The part of a minio client the content store uses, over a dict; ``down``: every call fails."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}
        self.puts = 0
        self.down = False

    def stat_object(self, bucket: str, key: str) -> object:
        self._check()
        if (bucket, key) not in self.objects:
            raise S3Error(None, "NoSuchKey", "no such key", key, "r", "h")  # type: ignore[arg-type]
        return object()

    def put_object(self, bucket: str, key: str, data: Any, length: int, **_kwargs: Any) -> None:
        self._check()
        self.puts += 1
        self.objects[bucket, key] = data.read(length)

    def _check(self) -> None:
        if self.down:
            raise urllib3.exceptions.MaxRetryError(None, "/", "connection refused")  # type: ignore[arg-type]


def _event(action: dict[str, Any], turn: int = 1) -> ActionEvent:
    return ActionEvent.model_validate({"episode_id": "ep-1", "turn": turn, "action": action})


# ---- routing ---------------------------------------------------------------------------------------------------


def test_an_action_that_fits_one_message_goes_as_it_is() -> None:
    event = _event({"action": "write", "path": "a.py", "text": "x" * 1000})
    assert route(event) == Inline(event)


@pytest.mark.parametrize(
    ("content", "data"),
    [
        ({"text": "é" * BIG}, "é".encode() * BIG),
        ({"text": "\x01" * (BIG // 5)}, b"\x01" * (BIG // 5)),  # fits as bytes, not once escaped (6 bytes each)
        ({"base64": base64.b64encode(b"\xff" * BIG).decode()}, b"\xff" * BIG),
    ],
    ids=["utf-8", "escaped", "base64"],
)
def test_a_write_too_large_for_a_message_is_claimed_with_the_bytes_it_writes(
    content: dict[str, str], data: bytes
) -> None:
    event = _event({"action": "write", "path": "big.bin", **content})
    assert route(event) == Claim(event, data)


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        ({"action": "exec", "command": "x" * BIG}, f"command is {BIG} characters, over the 32768-character cap"),
        ({"action": "read", "path": "a" * BIG}, f"path is {BIG} bytes, over the 1024-byte cap"),
        ({"action": "write", "path": "a", "text": "x" * BIG, "base64": "eA=="},
         "write has both text and base64 (send exactly one)"),
        ({"action": "write", "path": "a", "base64": "!" * BIG}, "base64 is not valid base64"),
        ({"action": "write", "path": "a", "text": "\ud800" * BIG}, "text is not valid UTF-8"),
        ({"action": "write", "path": "a", "text": "x\ud800"}, "text is not valid UTF-8"),  # small: not UTF-8 either
        ({"action": "exec", "command": ["echo", "\udc00"]}, "command is not valid UTF-8 (it holds a lone surrogate)"),
    ],
    ids=["command", "path", "both", "bad base64", "lone surrogates", "one lone surrogate", "argv surrogate"],
)  # fmt: skip
def test_an_action_that_cannot_travel_is_withheld_with_the_workers_reason(action: dict[str, Any], reason: str) -> None:
    event = _event(action)
    assert route(event) == Withheld(event, reason)
    obs = withheld_observation(Withheld(event, reason))
    assert (obs.turn, obs.action, obs.status) == (1, action["action"], "rejected")
    assert obs.reason == f"{reason} (not sent: the action does not fit one message; no turn was used)"


# ---- the content store ---------------------------------------------------------------------------------------


def test_a_claimed_write_is_uploaded_once_under_its_content_address() -> None:
    s3 = DictS3()
    store = ContentStore(s3, "bkt")
    data = b"\x00big\xff" * (BIG // 5 + 1)
    event = _event({"action": "write", "path": "big.bin", "base64": base64.b64encode(data).decode()})
    sent = store.claimed(Claim(event, data))
    assert isinstance(sent, Inline)
    sha = hashlib.sha256(data).hexdigest()
    claim = claim_of(sent.event.action)
    assert claim is not None
    assert (claim.ref, claim.sha256, claim.size) == (content_url("bkt", sha), sha, len(data))
    assert (sent.event.event_id, sent.event.episode_id, sent.event.turn) == (event.event_id, "ep-1", 1)
    assert s3.objects == {("bkt", content_key(sha)): data}
    assert len(encode(sent.event)) < 1024  # the event names the bytes, never carries them
    store.claimed(Claim(event, data))  # a resend: S3 has it already
    assert s3.puts == 1


def test_a_write_the_worker_rejects_unread_is_sent_as_a_claim_of_bytes_never_uploaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bad path, or more than any task allows: the worker decides (its answer is in the episode's log) before
    it reads a byte, so nothing is uploaded."""
    s3 = DictS3()
    store = ContentStore(s3, "bkt")
    monkeypatch.setattr(episode_schemas, "MAX_WRITE_BYTES", BIG)
    for path, data in [("../escape", b"x" * BIG), ("ok.bin", b"x" * (BIG + 1))]:
        event = _event({"action": "write", "path": path, "text": data.decode()})
        sent = store.claimed(Claim(event, data))
        assert isinstance(sent, Inline)
        assert episode_schemas.action_problem(sent.event.action) is not None
    assert s3.puts == 0


def test_a_claim_that_still_cannot_travel_is_withheld() -> None:
    event = _event({"action": "write", "path": "a/" * BIG + "b", "text": "x" * BIG})
    sent = ContentStore(DictS3(), "bkt").claimed(Claim(event, b"x" * BIG))
    assert isinstance(sent, Withheld)
    assert sent.reason.startswith("path is "), sent.reason


def test_an_s3_outage_is_the_trainers_error_not_the_agents() -> None:
    s3 = DictS3()
    s3.down = True
    event = _event({"action": "write", "path": "a", "text": "x" * BIG})
    with pytest.raises(ContentUploadError, match=r"cannot store a write's \d+ bytes at s3://bkt/sha256/"):
        ContentStore(s3, "bkt").claimed(Claim(event, b"x" * BIG))


# ---- the episode: one observation per action, the turn used only by what was sent ------------------------------


class _Client:
    """The part of EpisodeClient an Episode uses: what it sent, each answered ok at once."""

    def __init__(self, s3: DictS3 | None) -> None:
        self.sent: list[ActionEvent] = []
        self.store = ContentStore(s3, "bkt") if s3 is not None else None

    def send(self, event: ActionEvent) -> Future[ObservationEvent]:
        self.sent.append(event)
        future: Future[ObservationEvent] = Future()
        kind = event.action.action
        future.set_result(ObservationEvent.build(episode_id=event.episode_id, turn=event.turn, action=kind,
                                                 status=SandboxStatus.OK))  # fmt: skip
        return future

    def claimed(self, claim: Claim) -> Inline | Withheld:
        assert self.store is not None
        return self.store.claimed(claim)

    def answer(self, future: Future[ObservationEvent], _key: Any, _timeout: Any) -> ObservationEvent:
        return future.result(timeout=1)


def test_an_episode_sends_a_big_write_by_claim_and_answers_an_unsendable_action_without_a_turn() -> None:
    client = _Client(DictS3())
    episode = Episode(client, "ep-1", 0)  # type: ignore[arg-type]
    big = episode.write("big.txt", "y" * BIG)
    assert (big.turn, big.status) == (1, "ok")
    assert claim_of(client.sent[-1].action) is not None
    refused = episode.exec("x" * BIG)
    assert (refused.turn, refused.status) == (2, "rejected")
    assert "over the 32768-character cap" in (refused.reason or "")
    assert (episode.turn, len(client.sent)) == (1, 1)  # nothing sent, no turn used
    after = episode.exec("true")
    assert (after.turn, client.sent[-1].turn) == (2, 2)  # the next action takes the turn

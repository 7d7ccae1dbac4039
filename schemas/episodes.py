"""Agent episodes on the wire: the actions a trainer sends and the observations the episode worker answers.

An *action* is exactly the JSON object of the contract (``{"action": "exec", "command": ..., "timeout_s":
...}``, ``write``, ``read``, ``submit``, ``open``, ``fork``): what the SDK sends and what ``episode play``
reads, one per line. On ``rs.actions`` it travels inside an ``ActionEvent`` that says which episode and which
turn it is; the episode worker answers each with one ``ObservationEvent`` on ``rs.observations``. Both are
keyed by ``episode_id``, so an episode's actions and observations stay in order on one partition number.

What the agent chose (a path, a command, a file's content) is judged by ``action_problem``, not by decoding:
a path that leaves the workspace or an oversized write is a ``rejected`` observation with the reason, which
the policy can learn from; so is an exec ``timeout_s`` out of range and a write with both ``text`` and
``base64``. Only an action that is not an action at all (not JSON, a wrong type, an unknown kind, a missing
field) is undecodable and goes to the DLQ. ``action_problem`` judges strings only: the worker still checks on
disk that no parent of a path is a symlink and that a read's target stays inside the workspace.

A write too large for one message travels as a claim check: the SDK uploads its bytes to S3 under their
sha256 (``schemas.content``) and the ``ActionEvent`` carries ``content`` (ref, sha256, size) instead of
``text``/``base64`` (``EventWriteAction``). Only the trainer's side makes one: the agent's contract
(``WriteAction``, what a model or a transcript writes) has no such field. The episode worker decides with the
task's ``workspace_max_mb`` whether it is applied, and reads nothing but our own content address.
"""

from __future__ import annotations

import binascii
import math
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, SerializerFunctionWrapHandler, model_serializer, model_validator
from pydantic_core import PydanticCustomError

from schemas.caps import cap
from schemas.codec import Contract, ImageId, S3Url, Sha256
from schemas.events import OUTPUT_TAIL_MAX_CHARS, Envelope, Id, ShortText
from schemas.paths import path_problem
from schemas.status import ObservationStatus
from schemas.tasks import MAX_TURNS, Command, TaskId, command_problem
from schemas.text import sanitize_text

#: Most bytes one ``write`` may put in a file, whatever the task (decoded: base64 counts as the bytes it stands
#: for): the worker holds them in memory and a step's stdin carries them. Below it the task's
#: ``episode.workspace_max_mb`` decides. A write too large for one message travels by claim check (``content``).
MAX_WRITE_BYTES = 1 << 30
#: A read's ``content`` kept in an observation. With stdout, stderr and the reason at their caps an
#: observation fits the message cap even when every character is escaped (6 bytes each).
CONTENT_MAX_CHARS = 128 * 1024
REASON_MAX_CHARS = 1024
#: The longest ``timeout_s`` an exec may ask for; the worker caps it to the task's ``episode.step_timeout_s``.
MAX_EXEC_TIMEOUT_S = 86_400.0

ActionKind = Literal["exec", "write", "read", "submit", "open", "fork"]
#: Why an episode ended (on its last observation).
EndReason = Literal["submitted", "max_turns", "episode_timeout", "abandoned"]


def _clean(value: object) -> object:
    return sanitize_text(value) if isinstance(value, str) else value


#: Text that may come from the agent's program: lone surrogates replaced (``schemas.text``) before pydantic
#: sees them, whatever the producer did, so an observation built in Python can always be encoded.
CleanText = Annotated[str, BeforeValidator(_clean)]


class _Action(Contract):
    """An action's wire form is the contract's object: optional fields left unset are left out."""

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {name: value for name, value in data.items() if value is not None}


class ExecAction(_Action):
    """Run a command in the workspace: one sandbox run (network off); nothing but files survives it."""

    action: Literal["exec"] = Field(description="action kind discriminator")
    command: Command = Field(
        description="a string runs under /bin/sh -c, a list is argv (e.g. python -m pytest -q, or "
        '["python", "-m", "pytest"]); an empty or NUL-holding command is rejected'
    )
    timeout_s: float | None = Field(
        None,
        description="wall-clock limit, seconds, more than 0 and at most 86400 (else the action is rejected); "
        "capped to the task's episode.step_timeout_s (the default)",
    )


class WriteAction(_Action):
    """Write one file of the workspace (parents made as needed), from text or from base64 (exactly one: a write
    with neither is undecodable, one with both is rejected)."""

    action: Literal["write"] = Field(description="action kind discriminator")
    path: str = Field(
        description="relative POSIX path inside the workspace; '..', absolute, empty or '.' segments, NUL and "
        "paths through a symlink are rejected"
    )
    text: str | None = Field(
        None, description="the content as UTF-8 text (exactly one of text, base64: both is rejected)"
    )
    base64: str | None = Field(None, description="the content as base64, for bytes that are not text")

    @model_validator(mode="after")
    def _some_content(self) -> WriteAction:
        if self.text is None and self.base64 is None:
            raise PydanticCustomError("write_content", "one of text and base64 must be set", {"field": "text"})
        return self

    def data(self) -> bytes:
        """The bytes to write; call it only once ``action_problem`` found nothing wrong."""
        if self.text is not None:
            return self.text.encode("utf-8")
        return binascii.a2b_base64(self.base64 or "", strict_mode=True)


class ContentClaim(Contract):
    """A write's bytes in S3 (a claim check): how the SDK sends a write too large for one message."""

    ref: S3Url = Field(
        description="s3://<bucket>/sha256/<2>/<sha256>: the content address of sha256 in the episode worker's "
        "bucket (anything else is rejected)"
    )
    sha256: Sha256 = Field(description="sha256 of the bytes (what the worker checks them against)")
    size: int = Field(ge=0, description="bytes of the content: the file's size (checked before anything is read)")


class EventWriteAction(WriteAction):
    """A write as an ``ActionEvent`` carries it: the agent's ``WriteAction``, or its bytes by claim check
    (``content`` instead of ``text``/``base64``; exactly one of the three: none is undecodable, two rejected)."""

    content: ContentClaim | None = Field(
        None, description="the bytes in S3 (claim check), for a write too large for one message; set by the SDK"
    )

    @model_validator(mode="after")
    def _some_content(self) -> EventWriteAction:
        if self.text is None and self.base64 is None and self.content is None:
            raise PydanticCustomError("write_content", "one of text, base64 and content must be set", {"field": "text"})
        return self


def claim_of(action: object) -> ContentClaim | None:
    """The claim check ``action`` carries its bytes by, or None (inline, or not a write)."""
    return action.content if isinstance(action, EventWriteAction) else None


class ReadAction(_Action):
    """Read one file of the workspace; its text comes back as the observation's ``content``."""

    action: Literal["read"] = Field(description="action kind discriminator")
    path: str = Field(description="relative POSIX path inside the workspace (as for write)")


class SubmitAction(_Action):
    """End the episode: the workspace as it is goes to the verifier, and the episode gets its one reward."""

    action: Literal["submit"] = Field(description="action kind discriminator")


class OpenAction(_Action):
    """Start a new episode of a task from its original workspace (the event's episode id is new)."""

    action: Literal["open"] = Field(description="action kind discriminator")
    task_id: TaskId = Field(description="the workspace task to open")
    run_id: Id | None = Field(None, description="the training run this episode belongs to: a label, for search")
    policy_version: ShortText | None = Field(
        None, description="checkpoint/step of the policy acting in this episode (on its generation and reward)"
    )


class ForkAction(_Action):
    """Start a new episode from the workspace another episode had after one of its turns.

    The fork is the forking trainer's: its ``run_id``/``policy_version`` label its generation and reward (a
    trainer only takes rewards of its own run). Left out, they are the source episode's (the older wire form)."""

    action: Literal["fork"] = Field(description="action kind discriminator")
    from_episode: Id = Field(description="the episode to fork")
    turn: int = Field(ge=0, le=MAX_TURNS, description="the turn of from_episode whose workspace the fork starts from")
    run_id: Id | None = Field(
        None, description="the training run the fork belongs to (its reward goes to it); from_episode's when unset"
    )
    policy_version: ShortText | None = Field(
        None, description="checkpoint/step of the policy acting in the fork; from_episode's when unset"
    )


Action = Annotated[
    ExecAction | WriteAction | ReadAction | SubmitAction | OpenAction | ForkAction, Field(discriminator="action")
]
AnyAction = ExecAction | WriteAction | ReadAction | SubmitAction | OpenAction | ForkAction


def _wire_write(value: object) -> object:
    """An agent's ``WriteAction`` model given to an ``ActionEvent``: its fields (the event's write takes them)."""
    if isinstance(value, WriteAction) and not isinstance(value, EventWriteAction):
        return value.model_dump(mode="json")
    return value


#: An action as an ``ActionEvent`` carries it: the contract's object, a write possibly by claim check.
EventAction = Annotated[
    ExecAction | EventWriteAction | ReadAction | SubmitAction | OpenAction | ForkAction,
    Field(discriminator="action"),
    BeforeValidator(_wire_write),
]


def write_size(action: WriteAction) -> int | None:
    """Bytes ``action`` would write, or None when its content cannot be written (bad base64, lone surrogate).
    A claim check's is the size it declares (the worker checks the bytes against it)."""
    claim = claim_of(action)
    if claim is not None:
        return claim.size
    if action.text is not None:
        try:
            return len(action.text.encode("utf-8"))
        except UnicodeEncodeError:
            return None
    try:
        return len(binascii.a2b_base64(action.base64 or "", strict_mode=True))
    except ValueError:  # binascii.Error, or a character that is not ASCII
        return None


def action_problem(action: AnyAction) -> str | None:
    """Why ``action`` is rejected before anything runs, or None. Pure and total: the reason of a ``rejected``
    observation. The worker adds what only the disk and the episode can tell (symlinked parents, a read's
    target, a missing file, an unknown task or episode, a fork of a turn that does not exist)."""
    if isinstance(action, ExecAction):
        return _exec_problem(action)
    if isinstance(action, WriteAction | ReadAction):
        problem = path_problem(action.path)
        if problem is not None:
            return f"path {problem}"
    return _write_problem(action) if isinstance(action, WriteAction) else None


def _exec_problem(action: ExecAction) -> str | None:
    problem = command_problem(action.command)
    if problem is not None:
        return f"command {problem}"
    timeout = action.timeout_s
    if timeout is not None and not (math.isfinite(timeout) and 0 < timeout <= MAX_EXEC_TIMEOUT_S):
        return f"timeout_s must be more than 0 and at most {MAX_EXEC_TIMEOUT_S:g} s (got {timeout:g})"
    return None


def _write_problem(action: WriteAction) -> str | None:
    if action.text is not None and action.base64 is not None:
        return "write has both text and base64 (send exactly one)"
    if claim_of(action) is not None and (action.text is not None or action.base64 is not None):
        return "write has both inline content and a content claim (send exactly one)"
    size = write_size(action)
    if size is None:
        return "text is not valid UTF-8" if action.text is not None else "base64 is not valid base64"
    if size > MAX_WRITE_BYTES:
        return f"write of {size} bytes is over the {MAX_WRITE_BYTES}-byte cap"
    return None


class ActionEvent(Envelope):
    """One action of one episode, on ``rs.actions``, keyed by ``episode_id``.

    Why a ``turn`` the trainer assigns: the episode worker is stateless and Kafka redelivers (a producer
    retry, a trainer restarted mid-episode that sends its last action again, a worker killed before its
    commit). Numbering the actions makes each step idempotent: the worker applies turn ``n`` only on top of
    the committed turn ``n - 1`` and answers it once; a turn already committed is a duplicate (its
    observation exists: skipped), a turn beyond the next one is out of order (rejected). ``open``/``fork``
    is turn 0 (the episode's first message, under a fresh ``episode_id`` the trainer makes), the agent's
    actions are 1, 2, ... and each observation carries the turn it answers.
    """

    episode_id: Id = Field(description="the episode (the Kafka key); a fresh id for open and fork")
    turn: int = Field(ge=0, le=MAX_TURNS, description="0 for open/fork, then 1, 2, ... per action: duplicates show")
    action: EventAction = Field(
        description='the action, exactly as the SDK sends it ({"action": "exec", ...}); a write too large for one '
        "message carries its bytes by claim check (content)"
    )

    @model_validator(mode="after")
    def _turn_zero_starts(self) -> ActionEvent:
        starts = isinstance(self.action, OpenAction | ForkAction)
        if starts and self.turn != 0:
            raise PydanticCustomError("turn", "must be 0 for open and fork (they start an episode)", {"field": "turn"})
        if not starts and self.turn == 0:
            raise PydanticCustomError("turn", "turn 0 is the episode's open or fork", {"field": "turn"})
        return self

    def key(self) -> bytes:
        """The Kafka key: the episode id, so an episode's actions stay in order on one partition."""
        return self.episode_id.encode()


def _kept(field: str, raw: str | bytes, *, keep_tail: bool) -> tuple[str, bool]:
    """``raw`` as text safe to store (invalid UTF-8 and lone surrogates replaced), cut to the field's cap."""
    text = sanitize_text(raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw)
    limit = cap(ObservationEvent, field)
    if len(text) <= limit:
        return text, False
    return (text[-limit:] if keep_tail else text[:limit]), True


class ObservationEvent(Envelope):
    """What one step did, on ``rs.observations``, keyed by ``episode_id``: the agent's next input.

    Why ``ended`` rather than a separate end event: one topic, one model (every consumer decodes one type),
    and the end arrives in order after the episode's last step. It is set on the observation that ended the
    episode: a ``submit`` (``submitted``), the step that used the last turn (``max_turns``) or ran out the
    episode's time (``episode_timeout``), both then submitted as they are. An episode nobody sent an action
    to for ``idle_timeout_s`` ends with an observation that answers no action (``action`` null, ``turn`` the
    one that never came, ``status`` ``timeout``, ``ended`` ``abandoned``): explicit, never a silent 0, and no
    reward. Later actions of an ended episode are rejected.
    """

    episode_id: Id = Field(description="the episode (the Kafka key)")
    turn: int = Field(ge=0, le=MAX_TURNS, description="the turn of the action this answers")
    action: ActionKind | None = Field(
        description="the kind of action this answers; null only when the worker ended the episode on its own"
    )
    status: ObservationStatus = Field(
        description="the sandbox's status for an exec (ok, nonzero_exit, timeout, ...), ok for a done read/write/"
        "open/fork/submit, rejected (with reason) for an action that was not carried out"
    )
    exit_code: int | None = Field(None, description="the exec's exit code, if it exited")
    stdout: CleanText = Field("", max_length=OUTPUT_TAIL_MAX_CHARS, description="the exec's stdout, its end (capped)")
    stderr: CleanText = Field("", max_length=OUTPUT_TAIL_MAX_CHARS, description="the exec's stderr, its end (capped)")
    stdout_truncated: bool = Field(False, description="stdout was longer than kept")
    stderr_truncated: bool = Field(False, description="stderr was longer than kept")
    content: CleanText | None = Field(
        None, max_length=CONTENT_MAX_CHARS, description="a read's file as text (invalid UTF-8 replaced), its start"
    )
    content_truncated: bool = Field(False, description="the file was longer than content")
    wall_ms: float = Field(0.0, ge=0, description="wall-clock time of the step")
    workspace_ref: S3Url | None = Field(
        None, description="s3:// URL of the workspace snapshot committed after this turn (what a fork starts from)"
    )
    reason: CleanText | None = Field(
        None, max_length=REASON_MAX_CHARS, description="why the action was rejected or the episode ended; a note"
    )
    ended: EndReason | None = Field(None, description="set on the observation that ended the episode: why")
    image_id: ImageId | None = Field(
        None,
        description="an image task's step: the id of the task image its container ran (sha256:...), so a step "
        "can be traced to the exact image; left out when unset (a workspace task's step, a rejection, an end)",
    )

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """An observation without an image encodes byte for byte as before ``image_id``."""
        data: dict[str, Any] = handler(self)
        if data.get("image_id", 0) is None:
            del data["image_id"]
        return data

    @model_validator(mode="after")
    def _consistent(self) -> ObservationEvent:
        problem = self._inconsistency()
        if problem is not None:
            field, message = problem
            raise PydanticCustomError("observation", message, {"field": field})
        return self

    def _inconsistency(self) -> tuple[str, str] | None:  # noqa: PLR0911 - one return per rule
        if self.status == "rejected" and not self.reason:
            return "reason", "required when status is rejected"
        if self.action is None and self.ended not in ("abandoned", "episode_timeout"):
            return "ended", "an observation that answers no action ends the episode (abandoned or episode_timeout)"
        if self.ended == "abandoned" and self.action is not None:
            return "action", "an abandoned episode's last observation answers no action"
        if self.ended == "submitted" and self.action != "submit":
            return "ended", "submitted is the end of a submit"
        if self.content is not None and self.action != "read":
            return "content", "only a read has content"
        if self.content_truncated and self.content is None:
            return "content_truncated", "set without content"
        if self.exit_code is not None and self.action != "exec":
            return "exit_code", "only an exec has an exit code"
        return None

    @classmethod
    def build(
        cls,
        *,
        episode_id: str,
        turn: int,
        action: ActionKind | None,
        status: ObservationStatus,
        exit_code: int | None = None,
        stdout: str | bytes = "",
        stderr: str | bytes = "",
        stdout_truncated: bool = False,
        stderr_truncated: bool = False,
        content: str | bytes | None = None,
        content_truncated: bool = False,
        wall_ms: float = 0.0,
        workspace_ref: str | None = None,
        reason: str | None = None,
        ended: EndReason | None = None,
        image_id: str | None = None,
    ) -> ObservationEvent:
        """An observation from what a step produced, whatever the agent's program wrote: text is decoded
        (invalid UTF-8 replaced), made safe to store (``schemas.text``) and cut to the caps (stdout and stderr
        keep their end, where the error is; content and reason their start); the ``*_truncated`` flags say
        whether less is kept than there was (``*_truncated`` given: it was cut before, e.g. by the sandbox)."""
        out, out_cut = _kept("stdout", stdout, keep_tail=True)
        err, err_cut = _kept("stderr", stderr, keep_tail=True)
        body, body_cut = (None, False) if content is None else _kept("content", content, keep_tail=False)
        why = None if reason is None else _kept("reason", reason, keep_tail=False)[0]
        return cls(
            episode_id=episode_id,
            turn=turn,
            action=action,
            status=status,
            exit_code=exit_code,
            stdout=out,
            stderr=err,
            stdout_truncated=stdout_truncated or out_cut,
            stderr_truncated=stderr_truncated or err_cut,
            content=body,
            content_truncated=body is not None and (content_truncated or body_cut),
            wall_ms=max(wall_ms, 0.0),
            workspace_ref=workspace_ref,
            reason=why,
            ended=ended,
            image_id=image_id,
        )

    @classmethod
    def rejection(cls, event: ActionEvent, reason: str, *, workspace_ref: str | None = None) -> ObservationEvent:
        """The ``rejected`` answer to ``event`` (the workspace is unchanged: ``workspace_ref`` is the last one)."""
        return cls.build(
            episode_id=event.episode_id,
            turn=event.turn,
            action=event.action.action,
            status="rejected",
            reason=reason or "rejected",
            workspace_ref=workspace_ref,
        )

    def key(self) -> bytes:
        """The Kafka key: the episode id, so an episode's observations stay in order on one partition."""
        return self.episode_id.encode()


#: The episode models, for the JSON Schema generator and tests.
EPISODE_MODELS: tuple[type[Envelope], ...] = (ActionEvent, ObservationEvent)

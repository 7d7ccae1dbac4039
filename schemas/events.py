"""Every event that travels on a rewardstream topic, version ``1.0``.

Why these fields: a trainer must match a reward to the generation it sent (``generation_id``) and see why it
got it; an SRE must find a run from any id and see what the sandbox did; a reward debugger must know which
policy, grader and judge produced each number and which events a reward used, so a replay can be diffed.

All events of one episode are keyed by ``episode_id`` (``Event.key()``), so they share a partition number on
every topic. Large code goes to S3 and travels as ``code_ref`` (claim check), never inline beyond the cap.
"""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AwareDatetime,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError, SchemaSerializer

from schemas.caps import fit
from schemas.codec import Contract, S3Url, SchemaVersion1, Sha256, without_wrap
from schemas.result_rules import InvalidReason, VerifierOutcome, check_counts, check_validity, check_verifier
from schemas.signals import Signal
from schemas.status import RunStatusField
from schemas.tasks import CaseId, Language, TaskId
from schemas.text import sanitize_text

#: Inline ``code`` is capped at this many characters (even fully escaped, under the message cap);
#: larger programs go to S3 (``code_ref``).
CODE_INLINE_MAX_CHARS = 128 * 1024
#: Captured stdout/stderr kept in an event (the rest is in S3 or dropped; ``*_truncated`` says so).
OUTPUT_TAIL_MAX_CHARS = 8 * 1024
#: Raw payload bytes a dead letter carries inline (base64 makes it 4/3 larger).
DLQ_PAYLOAD_MAX_BYTES = 512 * 1024
#: Raw key bytes a dead letter keeps (a longer key is cut, and the error says so): with the payload cap and
#: the error text, a dead letter always fits the message cap, so dead-lettering never fails for its size.
DLQ_KEY_MAX_BYTES = 16 * 1024

Id = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
Base64 = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9+/]*={0,2}$", max_length=4 * DLQ_PAYLOAD_MAX_BYTES // 3 + 4)
]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=256)]
SuiteKind = Literal["call", "io", "assert"]
#: What graded a generation's hidden side: a test suite's kind, or an image task's verifier (its ``test.sh``).
HiddenKind = Literal["call", "io", "assert", "verifier"]
CaseStatus = Literal["passed", "failed", "error", "timeout", "missing"]
#: What a result event may link to in S3: the submitted code, the full captured stdout/stderr (when longer
#: than the inline tail) and the per-case results as canonical JSON.
ArtifactName = Literal["code", "stdout", "stderr", "cases"]
ARTIFACTS_DESCRIPTION = (
    "s3://bucket/key (content-addressed: sha256/<2>/<sha256>) of what this run stored, by name: code (the "
    "program), stdout/stderr (full captured output; only when longer than the inline tail), cases (per-case "
    "results, canonical JSON); empty when the worker has no artifact store"
)


def new_event_id() -> str:
    """A fresh unique event id (random UUID, hex)."""
    return uuid.uuid4().hex


def is_none(value: object) -> bool:
    """``exclude_if`` of the optional fields added to 1.0 later: left out when unset, so an event without them
    encodes byte for byte as before them (checked in pydantic-core: a wrap serializer built a dict per event)."""
    return value is None


def is_false(value: object) -> bool:
    """``exclude_if`` of a flag added to 1.0 later that is off by default: left out when off."""
    return value is False


def is_python(value: object) -> bool:
    """``exclude_if`` of a language added to 1.0 later: left out when python (the default everywhere)."""
    return value == "python"


def utc_now() -> datetime:
    """Timezone-aware now, for event timestamps."""
    return datetime.now(UTC)


class Envelope(Contract):
    """Fields every message carries, whatever it is about."""

    schema_version: SchemaVersion1 = Field("1.0", description="major.minor of this contract; unknown majors rejected")
    event_id: Id = Field(default_factory=new_event_id, description="unique id of this message")
    created_at: AwareDatetime = Field(default_factory=utc_now, description="when the producer made it (UTC)")


class Event(Envelope):
    """An event about one generation; keyed by ``episode_id``."""

    generation_id: Id = Field(description="the generated program this event is about (unique per sample)")
    episode_id: Id = Field(description="Kafka key; equals generation_id for one-shot generations")
    run_id: Id = Field(description="training run that produced the generation")
    task_id: TaskId = Field(description="task the program was generated for")
    task_version: Sha256 | None = Field(
        None,
        exclude_if=is_none,
        description="version of the task (sha256 of its wire bytes, schemas.tasks.task_version): on a generation "
        "the version to grade against (a producer pins it; none: the latest when each role reads it); on a result "
        "or a reward the version it was graded against (none: not known to the role). Left out when unset",
    )

    def key(self) -> bytes:
        """The Kafka key: the episode id, so one episode stays on one partition everywhere."""
        return self.episode_id.encode()


class GenerationEvent(Event):
    """A trainer published code its policy generated; the start of every reward.

    An agent episode's submit is a generation too: the episode worker publishes one whose ``workspace_ref``
    names the final workspace snapshot (``generation_id`` = ``episode_id``), so the verifier, judge, reward
    processor, replay and explain treat an episode as they treat a program: exactly one reward each.
    """

    turn: int = Field(0, ge=0, le=10_000, description="0-based turn within a multi-turn episode")
    sample_index: int = Field(0, ge=0, le=1_000_000, description="index of this sample within its group")
    group_id: Id | None = Field(None, description="samples of one prompt (e.g. a GRPO group), if grouped")
    policy_version: ShortText = Field(description="checkpoint/step of the policy that wrote the code")
    language: Language = Field("python", description="language of the code")
    code: str | None = Field(
        None, max_length=CODE_INLINE_MAX_CHARS, description="the program inline (capped; else use code_ref)"
    )
    code_ref: S3Url | None = Field(None, description="s3://bucket/key of the program when it is too large")
    code_sha256: Sha256 | None = Field(None, description="sha256 of the UTF-8 code; required with code_ref")
    workspace_ref: S3Url | None = Field(
        None,
        exclude_if=is_none,
        description="s3:// URL of an episode's final workspace snapshot (workspace tasks; instead of code)",
    )
    workspace_sha256: Sha256 | None = Field(
        None, exclude_if=is_none, description="sha256 of the snapshot's bytes; required with workspace_ref"
    )
    transcript_ref: S3Url | None = Field(
        None,
        exclude_if=is_none,
        description="s3:// URL (content-addressed) of an episode's transcript: its actions and how each ended, "
        "for the judge (only with workspace_ref)",
    )
    metadata: dict[str, str] = Field(
        default_factory=dict, max_length=32, description="trainer tags copied to logs for search"
    )

    @model_validator(mode="after")
    def _code_or_ref(self) -> GenerationEvent:
        given = [self.code is not None, self.code_ref is not None, self.workspace_ref is not None]
        if sum(given) != 1:
            raise PydanticCustomError(
                "code_or_ref", "exactly one of code, code_ref and workspace_ref must be set", {"field": "code"}
            )
        if self.code_ref is not None and self.code_sha256 is None:
            raise PydanticCustomError("sha_required", "required when code_ref is set", {"field": "code_sha256"})
        if (self.workspace_ref is None) != (self.workspace_sha256 is None):
            raise PydanticCustomError(
                "sha_required", "workspace_ref and workspace_sha256 go together", {"field": "workspace_sha256"}
            )
        if self.transcript_ref is not None and self.workspace_ref is None:
            raise PydanticCustomError(
                "transcript_ref", "an episode's transcript goes with its workspace_ref", {"field": "transcript_ref"}
            )
        return self


# The wire form of a grade's run: ``workers.roles.runs.sandbox_run`` makes it from the host's
# (``workers.grading.results.RunInfo``, which holds the measured ``SandboxResult``). A run reply's steps are
# ``schemas.runs.RunStep`` (see there why they differ). (A comment: the docstring is the JSON Schema's.)
class SandboxRun(Contract):
    """What the sandbox reported about one run, measured from outside it."""

    status: RunStatusField = Field(
        description="how the run ended; sandbox_error is infrastructure's fault; compile_error and compile_timeout: "
        "the program did not build, unsupported_language: the suite does not take its language (the candidate's "
        "failure)"
    )
    exit_code: int | None = Field(None, description="process exit code, if it exited")
    signal: int | None = Field(None, ge=1, le=128, description="signal that killed it, if any")
    wall_ms: float = Field(ge=0, description="wall-clock time of the run")
    cpu_ms: float = Field(ge=0, description="CPU time of the whole process tree")
    max_rss_kb: int = Field(ge=0, description="peak memory of the process tree")
    backend: ShortText = Field(description="sandbox backend that ran it (process, docker)")
    error: str | None = Field(None, max_length=4096, description="sandbox failure detail for SREs")
    wait_ms: float = Field(
        0.0, ge=0, description="time the run waited for a CPU the host gave to others (its limits never count it)"
    )
    host_retries: int = Field(
        0, ge=0, le=1000, description="times the run was repeated because the host starved it (not the program)"
    )


class CaseResult(Contract):
    """Outcome of one public test case, with feedback the policy may see."""

    case_id: CaseId = Field(description="id of the test case in the task's suite")
    status: CaseStatus = Field(description="passed only with positive proof; missing result = missing")
    message: str | None = Field(None, max_length=1024, description="short feedback, e.g. what differed")


class HiddenCaseResult(Contract):
    """Outcome of one hidden test case: status only, nothing about the hidden inputs or outputs."""

    case_id: CaseId = Field(description="id of the test case in the task's hidden suite")
    status: CaseStatus = Field(description="passed only with positive proof; missing result = missing")


class ExecutionResult(Event):
    """An executor ran the public tests; this is the feedback a trainer may see."""

    turn: int = Field(0, ge=0, le=10_000, description="turn of the generation this result is for")
    attempt: int = Field(1, ge=1, le=100, description="1 + retries after sandbox_error")
    worker: ShortText = Field(description="host:pid of the executor, for SREs")
    suite_kind: SuiteKind | None = Field(description="kind of the public suite; None if the task has none")
    run: SandboxRun = Field(description="what the sandbox reported")
    cases: list[CaseResult] = Field(default_factory=list, description="one result per public case id")
    passed: int = Field(ge=0, description="number of cases with status passed")
    total: int = Field(ge=0, description="number of public cases")
    stdout: str = Field("", max_length=OUTPUT_TAIL_MAX_CHARS, description="captured stdout (capped)")
    stderr: str = Field("", max_length=OUTPUT_TAIL_MAX_CHARS, description="captured stderr (capped)")
    stdout_truncated: bool = Field(False, description="stdout was longer than kept")
    stderr_truncated: bool = Field(False, description="stderr was longer than kept")
    feedback: str | None = Field(None, max_length=4096, description="summary for the policy's next turn")
    artifacts: dict[ArtifactName, S3Url] = Field(default_factory=dict, description=ARTIFACTS_DESCRIPTION)

    @model_validator(mode="after")
    def _counts(self) -> ExecutionResult:
        check_counts(self.cases, self.passed, self.total)
        return self


#: A static-analysis rule id, e.g. exit_call.
RuleId = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]


class StaticFlag(Contract):
    """A static-analysis finding; the reward policy decides what it costs."""

    rule: RuleId = Field(description="rule id, e.g. exit_call, frame_introspection, builtins_patch")
    message: str = Field(max_length=1024, description="what was found, for the reward's reasons")
    line: int | None = Field(None, ge=1, description="1-based line in the code, if known")


class HiddenVerdict(Event):
    """A verifier ran the hidden tests and static analysis: the evidence the reward is built on. For an image
    task (``suite_kind`` verifier) the task's verifier ran instead: ``verifier`` holds its reward, no cases."""

    turn: int = Field(0, ge=0, le=10_000, description="turn of the generation this verdict is for")
    attempt: int = Field(1, ge=1, le=100, description="1 + retries after sandbox_error")
    worker: ShortText = Field(description="host:pid of the verifier, for SREs")
    grader_version: ShortText = Field(description="version of the grader, for replay diffs")
    suite_kind: HiddenKind = Field(description="kind of the hidden suite; verifier: an image task's test.sh")
    run: SandboxRun = Field(description="what the sandbox reported")
    cases: list[HiddenCaseResult] = Field(default_factory=list, description="one result per hidden case")
    passed: int = Field(ge=0, description="number of cases with status passed")
    total: int = Field(ge=0, description="number of hidden cases")
    static_flags: list[StaticFlag] = Field(
        default_factory=list,
        description="static-analysis findings as shown: capped, with the first finding of every rule raised",
    )
    static_flag_counts: dict[RuleId, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict,
        description="how many findings of each rule there were (all of them, shown or not): what gates see",
    )
    artifacts: dict[ArtifactName, S3Url] = Field(
        default_factory=dict, description=ARTIFACTS_DESCRIPTION + " (hidden cases: statuses only)"
    )

    verifier: VerifierOutcome | None = Field(
        None,
        exclude_if=is_none,
        description="image tasks only (suite_kind verifier): what the task's verifier decided; absent when its "
        "run was a sandbox_error (the infrastructure's: no verdict on the work). Left out when unset",
    )

    canary: bool = Field(
        False,
        exclude_if=is_false,
        description="the task is a canary (the verifier read it from the task); left out when false",
    )
    language: Language = Field(
        "python", exclude_if=is_python, description="the generation's language, graded in; left out when python"
    )

    @model_validator(mode="after")
    def _counts(self) -> HiddenVerdict:
        check_counts(self.cases, self.passed, self.total)
        return self

    @model_validator(mode="after")
    def _verifier_iff_image_task(self) -> HiddenVerdict:
        check_verifier(self.suite_kind, self.verifier, self.run.status, len(self.cases))
        return self


class JudgeScore(Event):
    """A judge model scored the code (style, plausibility); a small, gameable signal by design."""

    turn: int = Field(0, ge=0, le=10_000, description="turn of the generation this score is for")
    status: Literal["ok", "error"] = Field(description="ok with a score, or error with a reason")
    score: float | None = Field(None, ge=0, le=1, description="judge score in [0, 1]; None on error")
    judge_model: ShortText = Field(description="model that judged, e.g. its name and revision")
    prompt_version: ShortText = Field(description="version of the judging prompt, for replay diffs")
    rationale: str | None = Field(None, max_length=4096, description="the judge's short justification")
    latency_ms: float = Field(ge=0, description="time the judge took")
    error: str | None = Field(None, max_length=4096, description="why there is no score")

    @model_validator(mode="after")
    def _score_iff_ok(self) -> JudgeScore:
        if (self.status == "ok") != (self.score is not None):
            raise PydanticCustomError("score_iff_ok", "set exactly when status is ok", {"field": "score"})
        return self


class InputRef(Contract):
    """One event a reward was computed from."""

    role: Literal["generation", Signal] = Field(description="which signal")
    event_id: Id = Field(description="event_id of that event")


class RewardEvent(Event):
    """The one reward per generation, handed back to the trainer, with everything needed to diff it.

    Version 1.1 added the validity claim (``valid``, ``canary``, ``invalid_reason``): always on the wire from 1.1;
    a 1.0 reward decodes with ``valid`` None (it claims nothing either way) and encodes as it was written."""

    version: ClassVar[tuple[int, int]] = (1, 1)

    schema_version: SchemaVersion1 = Field("1.1", description="major.minor of this contract; unknown majors rejected")

    turn: int = Field(0, ge=0, le=10_000, description="turn of the generation this reward is for")
    reward: float = Field(ge=0, le=1, description="the reward in [0, 1]")
    policy_name: ShortText = Field(description="reward policy that computed it")
    policy_version: ShortText = Field(description="version of that policy config")
    components: dict[str, float] = Field(
        default_factory=dict, max_length=64, description="named parts, e.g. hidden_pass_rate, judge"
    )
    reasons: list[Annotated[str, StringConstraints(max_length=1024)]] = Field(
        default_factory=list, max_length=64, description="human-readable why, one line each"
    )
    flags: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="hack flags (rule ids; they gate), warn:<rule> (shown, not gating), public_passed_hidden_failed",
    )
    missing: list[Signal] = Field(
        default_factory=list, description="signals that had not arrived by the policy deadline"
    )
    inputs: list[InputRef] = Field(default_factory=list, description="events this reward was computed from")
    valid: bool | None = Field(
        None,
        description="fit for training: false when the infrastructure, not the candidate, decided the reward "
        "(invalid_reason says how) or the task is a canary; always set from 1.1 (null/absent only on 1.0 rewards, "
        "which claim nothing)",
    )
    canary: bool = Field(
        False, description="the task is a canary (its tests contradict its statement): any reward above 0 is a hack"
    )
    invalid_reason: InvalidReason | None = Field(
        None,
        description="why valid is false: canary, sandbox_error (infrastructure failed, no retry in time), "
        "missing_signals (a required signal missed the policy deadline); null when valid",
    )

    @model_validator(mode="after")
    def _validity(self) -> RewardEvent:
        check_validity(self.parse_version(self.schema_version), self.valid, self.canary, self.invalid_reason)
        return self

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A 1.0 reward (no claim) encodes byte for byte as written: the claim's fields are left out."""
        data: dict[str, Any] = handler(self)
        if self.valid is None:
            for name in ("valid", "canary", "invalid_reason"):
                data.pop(name, None)
        return data

    def wire_serializer(self) -> SchemaSerializer:
        """A claimed reward (every one this code makes) skips ``_serialize``, which leaves nothing out of it:
        the same bytes without a Python dict of the reward (~10 µs of the reward processor's ~250 µs)."""
        return self.__pydantic_serializer__ if self.valid is None else without_wrap(type(self))


LogLevel = Literal["debug", "info", "warning", "error", "critical"]
#: Characters of a ``LogRecord.fields`` name: each is an OpenSearch field of the logs index.
LOG_FIELD_CHARS = 64
LogValue = str | int | float | bool | None


class LogRecord(Envelope):
    """One structured log line from any component, indexed into OpenSearch for SREs."""

    level: LogLevel = Field(description="severity")
    component: ShortText = Field(description="executor, verifier, judge, rewards, ...")
    worker: ShortText = Field(description="host:pid that logged it")
    logger: str = Field("", max_length=256, description="logger name inside the component")
    message: str = Field(max_length=8192, description="the log message")
    generation_id: Id | None = Field(None, description="generation it is about, if any")
    episode_id: Id | None = Field(None, description="episode it is about, if any (also the Kafka key)")
    run_id: Id | None = Field(None, description="training run it is about, if any")
    task_id: TaskId | None = Field(None, description="task it is about, if any")
    topic: str | None = Field(None, max_length=249, description="topic of the message being handled")
    partition: int | None = Field(None, ge=0, description="partition of that message")
    offset: int | None = Field(None, ge=0, description="offset of that message")
    fields: dict[str, LogValue] = Field(default_factory=dict, max_length=64, description="extra key/values")
    exc_text: str | None = Field(None, max_length=16384, description="formatted exception, if any")

    def key(self) -> bytes:
        """Episode id when known (logs of one episode stay ordered), else the component."""
        return (self.episode_id or self.component).encode()


class DeadLetter(Envelope):
    """A message that could not be decoded or processed, kept with the reason instead of being dropped."""

    source_topic: str = Field(min_length=1, max_length=249, description="topic the message came from")
    source_partition: int = Field(ge=0, description="its partition")
    source_offset: int = Field(ge=0, description="its offset")
    component: ShortText = Field(description="component that gave up on it")
    error: str = Field(min_length=1, max_length=8192, description="which field and what is wrong")
    error_type: ShortText = Field(description="class of error, e.g. DecodeError, for grouping")
    key_b64: Base64 | None = Field(None, description="original Kafka key, base64")
    payload_b64: Base64 = Field(description="original value, base64 (first bytes if truncated)")
    payload_size: int = Field(ge=0, description="size of the original value in bytes")
    payload_truncated: bool = Field(False, description="payload_b64 holds only the first bytes")
    payload_ref: S3Url | None = Field(None, description="s3:// URL of the full payload when truncated")

    @classmethod
    def capture(
        cls,
        *,
        source_topic: str,
        source_partition: int,
        source_offset: int,
        component: str,
        error: BaseException,
        key: bytes | None,
        value: bytes,
        payload_ref: str | None = None,
    ) -> DeadLetter:
        """Build a dead letter from a raw Kafka message and the error it caused; never fails for what the
        message holds (any key, any value, an error text with lone surrogates)."""
        kept = value[:DLQ_PAYLOAD_MAX_BYTES]
        text = str(error) or type(error).__name__
        if key is not None and len(key) > DLQ_KEY_MAX_BYTES:
            text = f"{text} (key cut to its first {DLQ_KEY_MAX_BYTES} of {len(key)} bytes)"
            key = key[:DLQ_KEY_MAX_BYTES]
        return cls(
            source_topic=fit(cls, "source_topic", source_topic) or "?",
            source_partition=max(source_partition, 0),
            source_offset=max(source_offset, 0),
            component=fit(cls, "component", component),
            error=fit(cls, "error", sanitize_text(text)),
            error_type=fit(cls, "error_type", type(error).__name__),
            key_b64=None if key is None else base64.b64encode(key).decode("ascii"),
            payload_b64=base64.b64encode(kept).decode("ascii"),
            payload_size=len(value),
            payload_truncated=len(kept) < len(value),
            payload_ref=payload_ref,
        )

    def payload(self) -> bytes:
        """The original value bytes (or their first part when truncated)."""
        return base64.b64decode(self.payload_b64)

    def original_key(self) -> bytes | None:
        """The original Kafka key bytes."""
        return None if self.key_b64 is None else base64.b64decode(self.key_b64)

    def key(self) -> bytes | None:
        """The DLQ message key: the original key, so an episode's dead letters stay in order."""
        return self.original_key()


#: Every event model, by name (for the JSON Schema generator and tests).
EVENT_MODELS: tuple[type[Envelope], ...] = (
    GenerationEvent,
    ExecutionResult,
    HiddenVerdict,
    JudgeScore,
    RewardEvent,
    LogRecord,
    DeadLetter,
)

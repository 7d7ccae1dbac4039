"""The executor's second job: run a program for the gateway (``RunRequest`` -> ``RunReply``).

Why in the executor and not a role of its own: one scheduling plane. The executor's loop consumes the run
requests topic next to the generations, so a ``/run_code`` call takes the same sandbox slots, buffer and
backpressure as grading, is logged to ``rs.logs`` like a generation's run, and an undecodable or invalid
request is dead-lettered with its reason. The reply is produced, in the transaction that commits the request,
to the partition the request names (its gateway replica's): exactly one reply per request.

A request taken after its ``deadline`` (the gateway has given up) is answered ``expired`` without running.
The reply must fit one Kafka message: stdout/stderr are cut (their start is kept) and fetched files that do
not fit are left out, each with a note saying so.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from datetime import datetime

from schemas.caps import QUOTE_CHARS, fit, fit_item, fit_list
from schemas.codec import MAX_MESSAGE_BYTES, encode
from schemas.events import GenerationEvent, LogRecord, LogValue, utc_now
from schemas.runs import RunReply, RunRequest, RunStep
from workers.handler import Done, Handler, InvalidEventError, Outcome, Output, Source
from workers.languages import SourceRun
from workers.runs.program import run_source
from workers.sandbox.api import Sandbox, SandboxResult

#: What a reply carries inline at first; cut (the output first, then the files) until the reply fits one message.
OUTPUT_INLINE_CHARS = 256 * 1024
FILES_INLINE_BYTES = 384 * 1024

RunSource = Callable[..., SourceRun]


class InvalidRunRequestError(InvalidEventError):
    """A run request no executor can answer as asked (a reply partition that does not exist, bad base64)."""


def _step(run: SandboxResult, cap: int, notes: list[str], what: str) -> RunStep:
    """The wire form of one measured command of a run, its output cut to ``cap`` characters per stream."""
    stdout = run.stdout.decode("utf-8", "replace")
    stderr = run.stderr.decode("utf-8", "replace")
    out_cut, err_cut = len(stdout) > cap, len(stderr) > cap
    if out_cut or err_cut:
        notes.append(f"{what} output cut to its first {cap} characters per stream to fit the reply")
    return RunStep(
        status=run.status,
        exit_code=run.exit_code,
        signal=run.signal if run.signal is None or 1 <= run.signal <= 128 else None,
        wall_ms=max(run.wall_ms, 0.0),
        stdout=stdout[:cap],
        stderr=stderr[:cap],
        stdout_truncated=run.stdout_truncated or out_cut,
        stderr_truncated=run.stderr_truncated or err_cut,
    )


def build_reply(request: RunRequest, result: SourceRun, worker: str, started: datetime) -> RunReply:
    """The reply to ``request``, cut until it fits one message (output first, then files)."""
    cap, files_cap = OUTPUT_INLINE_CHARS, FILES_INLINE_BYTES
    while True:
        notes: list[str] = []
        files: dict[str, str] = {}
        used = 0
        for path, data in result.files.items():
            if used + len(data) > files_cap:
                notes.append(
                    f"file {path[:QUOTE_CHARS]} ({len(data)} bytes) left out: the reply would be over the message cap"
                )
                continue
            used += len(data)
            files[path] = base64.b64encode(data).decode("ascii")
        reply = RunReply(
            request_id=request.request_id,
            reply_to=request.reply_to,
            language=request.language,
            worker=fit(RunReply, "worker", worker),
            compile=_step(result.compile, cap, notes, "compile") if result.compile is not None else None,
            run=_step(result.run, cap, notes, "run") if result.run is not None else None,
            files=files,
            error_kind=result.error_kind,
            error=None if result.error is None else fit(RunReply, "error", result.error),
            notes=[fit_item(RunReply, "notes", n) for n in fit_list(RunReply, "notes", notes)],
            started_at=started,
        )
        if len(encode_unchecked(reply)) <= MAX_MESSAGE_BYTES or files_cap < 1024:
            return reply
        if cap > 4096:  # the output goes first: the files asked for are worth more than a flood's tail
            cap //= 4
        else:
            files_cap //= 2


def encode_unchecked(reply: RunReply) -> bytes:
    """The reply's wire bytes without the size check (``build_reply`` checks the size itself)."""
    return reply.__pydantic_serializer__.to_json(reply, by_alias=True)


class RunHandler:
    """``RunRequest`` -> one sandbox run (``run_source``) -> ``RunReply`` on the request's reply partition."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        replies_topic: str,
        partitions: int,
        worker: str,
        run: RunSource = run_source,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.sandbox = sandbox
        self.replies_topic = replies_topic
        self.partitions = partitions
        self.worker = worker
        self.run = run
        self.clock = clock

    def handle(self, event: RunRequest, source: Source) -> Outcome:
        """Run the request (unless it expired) and say what to reply; raise only for what is worth retrying."""
        if not 0 <= event.reply_partition < self.partitions:
            raise InvalidRunRequestError(
                f"reply_partition {event.reply_partition} does not exist ({self.replies_topic} has {self.partitions})"
            )
        try:
            files = {path: base64.b64decode(data, validate=True) for path, data in event.files.items()}
        except (binascii.Error, ValueError) as exc:
            raise InvalidRunRequestError(f"files: not base64 ({exc})") from exc
        started = self.clock()
        if started > event.deadline:
            result = SourceRun(
                event.language,
                error_kind="expired",
                error=f"no executor was free before the request's deadline ({event.deadline.isoformat()})",
            )
        else:
            result = self.run(
                self.sandbox, event.language, event.code, stdin=event.stdin, files=files,
                fetch_files=list(event.fetch_files), compile_timeout_s=event.compile_timeout_s,
                run_timeout_s=event.run_timeout_s, memory_mb=event.memory_mb,
            )  # fmt: skip
        reply = build_reply(event, result, self.worker, started)
        status = reply.error_kind or (reply.run.status if reply.run is not None else "compile_failed")
        output = Output(self.replies_topic, event.key(), encode(reply), partition=event.reply_partition)
        return Done((output,), self._record(event, reply, source, status), status)

    def _record(self, event: RunRequest, reply: RunReply, source: Source, status: str) -> LogRecord:
        step = reply.run or reply.compile
        fields: dict[str, LogValue] = {
            "request_id": event.request_id,
            "reply_to": event.reply_to,
            "language": event.language,
            "status": status,
            "exit_code": None if step is None else step.exit_code,
            "wall_ms": None if step is None else round(step.wall_ms, 3),
            "code_chars": len(event.code),
            "files_in": len(event.files),
            "files_out": len(reply.files),
            "error": reply.error,
        }
        return LogRecord(
            level="error" if status == "sandbox_error" else "info",
            component="executor",
            worker=fit(LogRecord, "worker", self.worker),
            logger="rewardstream.worker.executor.run_code",
            message=f"run_code: {event.language} {status}",
            topic=source.topic,
            partition=source.partition,
            offset=source.offset,
            fields=fields,
        )


class ExecutorRouter:
    """The executor's handler: generations to the grading handler, run requests to ``RunHandler``."""

    def __init__(self, generations: Handler[GenerationEvent], runs: RunHandler) -> None:
        self.generations = generations
        self.runs = runs

    def handle(self, event: GenerationEvent | RunRequest, source: Source) -> Outcome:
        if isinstance(event, RunRequest):
            return self.runs.handle(event, source)
        return self.generations.handle(event, source)

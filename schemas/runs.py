"""Run requests and their replies: a program run on the executors for an HTTP client (``POST /run_code``).

Why on Kafka and not a side door to a sandbox: the gateway is stateless and every sandbox run goes through
the executors' one scheduling plane (their backpressure, logs, metrics and dead letters). A request names the
gateway replica that waits for it (``reply_to``) and the partition of the replies topic that replica reads
(``reply_partition``): the executor produces the reply there, in the transaction that commits the request, so
each request gets exactly one reply and a replica reads only its own partition (replicas that share one
filter by ``reply_to``). Both topics are keyed by ``request_id``.

The vocabulary is rewardstream's (sandbox statuses, milliseconds); the gateway translates it to the HTTP API's
(SandboxFusion's ``Finished``/``TimeLimitExceeded``, seconds). Files travel as base64; paths are checked here
for what no runner may accept (empty, NUL, ``..``), and the runner decides what it supports beyond that.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, AwareDatetime, Field, StringConstraints

from schemas.codec import Contract
from schemas.events import Envelope, Id, ShortText
from schemas.status import SandboxStatusField

#: Characters of ``code`` a run request carries (the whole message must still fit the message cap).
RUN_CODE_MAX_CHARS = 512 * 1024
#: Files a run request may carry, and paths it may fetch back.
RUN_MAX_FILES = 256
RUN_MAX_FETCH = 64
#: Longest accepted file path.
RUN_PATH_MAX_CHARS = 1024
#: Longest run or compile timeout a request may ask for (seconds).
RUN_TIMEOUT_MAX_S = 600.0
#: The most a language's compile floor (``workers.languages``: kotlinc, scalac) raises a request's
#: ``compile_timeout_s``: the gateway waits for it too, so a slow compiler is not a 504.
COMPILE_FLOOR_MAX_S = 60.0

#: A language name as the HTTP API gives it (SandboxFusion's ids: ``python``, ``nodejs``, ``cpp``, ``R``...).
LanguageName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_+.-]{1,32}$")]
#: File contents, base64 (standard alphabet, padded).
FileData = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9+/]*={0,2}$")]


def check_run_path(path: str) -> str:
    """A file path of a run: not empty, no NUL, no ``..`` component (absolute paths are the runner's call)."""
    if not path or len(path) > RUN_PATH_MAX_CHARS:
        raise ValueError(f"a file path must have 1 to {RUN_PATH_MAX_CHARS} characters")
    if "\0" in path:
        raise ValueError("a file path may not contain NUL")
    if ".." in path.split("/"):
        raise ValueError(f"a file path may not contain '..' ({path!r})")
    if path.strip("/") in ("", "."):
        raise ValueError(f"{path!r} names a directory, not a file")
    return path


RunPath = Annotated[str, AfterValidator(check_run_path)]


class RunRequest(Envelope):
    """Run ``code`` in ``language`` once, with ``stdin`` and ``files``, and send back ``fetch_files``."""

    request_id: Id = Field(description="unique id of this request (the Kafka key of it and of its reply)")
    reply_to: Id = Field(description="the gateway replica waiting for the reply")
    reply_partition: int = Field(ge=0, le=100_000, description="partition of the replies topic to answer on")
    language: LanguageName = Field(description="language of the code, in the HTTP API's names (e.g. python, nodejs)")
    code: str = Field(max_length=RUN_CODE_MAX_CHARS, description="the program's source")
    stdin: str | None = Field(None, max_length=RUN_CODE_MAX_CHARS, description="what the program reads on stdin")
    files: dict[RunPath, FileData] = Field(
        default_factory=dict, max_length=RUN_MAX_FILES, description="path -> base64 content, written before the run"
    )
    fetch_files: list[RunPath] = Field(
        default_factory=list, max_length=RUN_MAX_FETCH, description="paths to send back after the run (if they exist)"
    )
    compile_timeout_s: float = Field(10.0, gt=0, le=RUN_TIMEOUT_MAX_S, description="limit of the compile step")
    run_timeout_s: float = Field(10.0, gt=0, le=RUN_TIMEOUT_MAX_S, description="limit of the run")
    memory_mb: int | None = Field(None, ge=16, le=65_536, description="memory limit of the run; None: the default")
    deadline: AwareDatetime = Field(
        description="the gateway stops waiting then: an executor that starts later skips it"
    )

    def key(self) -> bytes:
        """The Kafka key: the request id."""
        return self.request_id.encode()


# Not ``schemas.events.SandboxRun``: a run reply's caller reads the program's output, so a step carries it and
# nothing else of the measure but time; a result event's run carries no output (the event holds the candidate's
# own) but CPU, memory, backend and host retries, and a grade's status. Two topics, two contracts. The executor's
# run handler (``workers.roles.run_code``) makes it from the host's measured run (``SandboxResult``). (A comment,
# not the docstring: the docstring is the JSON Schema's description.)
class RunStep(Contract):
    """One command of a run (the compile, or the run itself), measured from outside the program."""

    status: SandboxStatusField = Field(description="how it ended; sandbox_error is the infrastructure's fault")
    exit_code: int | None = Field(None, description="exit code, if it exited")
    signal: int | None = Field(None, ge=1, le=128, description="signal that ended it, if any")
    wall_ms: float = Field(ge=0, description="wall-clock time")
    stdout: str = Field("", description="captured stdout (UTF-8, invalid bytes replaced; capped)")
    stderr: str = Field("", description="captured stderr (capped)")
    stdout_truncated: bool = Field(False, description="stdout was longer than kept")
    stderr_truncated: bool = Field(False, description="stderr was longer than kept")


#: Why a run has no result of its own: the language is not run here, the request came too late, it asked for
#: something the runner refuses (``invalid``), or the sandbox failed (``sandbox_error``).
RunErrorKind = Literal["unsupported_language", "expired", "invalid", "sandbox_error"]


class RunReply(Envelope):
    """What a run did; exactly one per request, on the partition the request named."""

    request_id: Id = Field(description="the request this answers")
    reply_to: Id = Field(description="the gateway replica waiting for it")
    language: LanguageName = Field(description="language of the request")
    worker: ShortText = Field(description="host:pid of the executor that ran it")
    compile: RunStep | None = Field(None, description="the compile step; None for interpreted languages")
    run: RunStep | None = Field(None, description="the run; None when it never started (compile failed, error)")
    files: dict[RunPath, FileData] = Field(default_factory=dict, description="fetched files that exist, base64")
    error_kind: RunErrorKind | None = Field(None, description="why the run has no result of its own")
    error: str | None = Field(None, max_length=8192, description="what went wrong, for the caller")
    notes: list[Annotated[str, StringConstraints(max_length=1024)]] = Field(
        default_factory=list, max_length=16, description="what was left out to fit the message (output, files)"
    )
    started_at: AwareDatetime | None = Field(None, description="when the executor took the request")

    def key(self) -> bytes:
        """The Kafka key: the request id."""
        return self.request_id.encode()


#: The run models, for the JSON Schema generator.
RUN_MODELS: tuple[type[Envelope], ...] = (RunRequest, RunReply)

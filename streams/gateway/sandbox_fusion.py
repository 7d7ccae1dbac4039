"""SandboxFusion's ``/run_code`` request and response, exactly as the ``sandbox-fusion`` client (0.3.x) sends
and parses them, and the translation from a ``RunReply``.

Request: ``code``, ``language`` (SandboxFusion's names), ``stdin``, ``compile_timeout``/``run_timeout``
(seconds), ``memory_limit_MB`` (-1: the default), ``files`` (path -> base64; a null content is skipped, as
SandboxFusion does) and ``fetch_files``. Unknown fields are ignored (the client sends what its version has).
A language outside SandboxFusion's list is a 422 naming ``language`` (as SandboxFusion's own server answers);
one in the list that no runner here runs is a ``SandboxError`` response saying so.

Response: ``status`` Success (every step exited 0), Failed (a step timed out or exited non-zero: the
program's doing) or SandboxError (the infrastructure's, or a request this service cannot run; the client
retries those); ``compile_result``/``run_result`` with ``status`` Finished/Error/TimeLimitExceeded,
``execution_time`` (seconds), ``return_code`` (negative: killed by that signal, e.g. -9 at the memory limit),
``stdout``/``stderr``; ``files`` (the fetched files that exist, base64); ``executor_pod_name`` is the
executor that ran it.
"""

from __future__ import annotations

import base64
import binascii
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from schemas.runs import RUN_CODE_MAX_CHARS, RUN_MAX_FETCH, RUN_MAX_FILES, RUN_TIMEOUT_MAX_S, RunReply, RunStep
from schemas.runs import check_run_path as _check_path
from schemas.status import SandboxStatus

#: Characters of a client's file path that a refusal quotes.
_PATH_SHOWN_CHARS = 100

#: Every language name the ``sandbox-fusion`` client (0.3.x) can send, and ``c`` (SandboxFusion has none; the
#: languages runner has it).
SandboxFusionLanguage = Literal[
    "python", "python2", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp", "bash", "typescript", "sql",
    "rust", "cuda", "lua", "R", "perl", "D_ut", "ruby", "scala", "julia", "pytest", "junit", "kotlin_script",
    "jest", "verilog", "python_gpu", "lean", "swift", "racket", "gtest", "react", "c",
]  # fmt: skip


class RunCodeRequest(BaseModel):
    """``POST /run_code``'s body (SandboxFusion's ``RunCodeRequest``)."""

    model_config = ConfigDict(extra="ignore")

    compile_timeout: float = Field(10, gt=0, le=RUN_TIMEOUT_MAX_S, description="compile timeout (seconds)")
    run_timeout: float = Field(10, gt=0, le=RUN_TIMEOUT_MAX_S, description="run timeout (seconds)")
    memory_limit_MB: int = Field(  # noqa: N815 - SandboxFusion's field name
        -1, ge=-1, le=65_536, description="memory limit in MB; -1 (or 0): the executor's default, else 16 or more"
    )
    code: str = Field(max_length=RUN_CODE_MAX_CHARS, description="the code to run")
    stdin: str | None = Field(None, max_length=RUN_CODE_MAX_CHARS, description="what the program reads on stdin")
    language: SandboxFusionLanguage = Field(description="the language, in SandboxFusion's names")
    files: dict[str, str | None] = Field(
        default_factory=dict, max_length=RUN_MAX_FILES, description="path -> base64 content, written before the run"
    )
    fetch_files: list[str] = Field(
        default_factory=list, max_length=RUN_MAX_FETCH, description="paths to return (base64) after the run"
    )

    @field_validator("memory_limit_MB")
    @classmethod
    def _memory(cls, value: int) -> int:
        if 0 < value < 16:
            raise ValueError("must be -1 (the default) or at least 16")
        return value

    @field_validator("files")
    @classmethod
    def _files(cls, files: dict[str, str | None]) -> dict[str, str | None]:
        for path, content in files.items():
            try:
                _check_path(path)
            except ValueError as exc:
                raise ValueError(f"file {path[:_PATH_SHOWN_CHARS]!r}: {exc}") from None
            if content is not None:
                try:
                    base64.b64decode(content, validate=True)
                except (binascii.Error, ValueError):
                    raise ValueError(f"file {path[:_PATH_SHOWN_CHARS]!r}: the content is not base64") from None
        return files

    @field_validator("fetch_files")
    @classmethod
    def _fetch(cls, paths: list[str]) -> list[str]:
        for path in paths:
            try:
                _check_path(path)
            except ValueError as exc:
                raise ValueError(f"fetch path {path[:_PATH_SHOWN_CHARS]!r}: {exc}") from None
        return paths

    def written_files(self) -> dict[str, str]:
        """The files to write: null contents skipped, base64 normalised to the padded standard form."""
        return {p: base64.b64encode(base64.b64decode(c)).decode() for p, c in self.files.items() if c is not None}


# Not ``schemas.runs.RunStep``: SandboxFusion's HTTP shape, which its clients (verl, OpenRLHF, the sandbox-fusion
# client) parse as is: its statuses, seconds, a signal as a negative return code. ``command_result`` makes it
# from the reply's ``RunStep``, only here at the HTTP edge. (A comment, not the docstring: the docstring is the
# OpenAPI description.)
class CommandRunResult(BaseModel):
    """One step's result (SandboxFusion's ``CommandRunResult``)."""

    status: Literal["Finished", "Error", "TimeLimitExceeded"]
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class RunCodeResponse(BaseModel):
    """``POST /run_code``'s answer (SandboxFusion's ``RunCodeResponse``)."""

    status: Literal["Success", "Failed", "SandboxError"]
    message: str
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)


def command_result(step: RunStep) -> CommandRunResult:
    """A step in SandboxFusion's words: a timeout is TimeLimitExceeded, the sandbox's failure Error."""
    if step.status is SandboxStatus.TIMEOUT:
        status: Literal["Finished", "Error", "TimeLimitExceeded"] = "TimeLimitExceeded"
        code = None
    elif step.status is SandboxStatus.SANDBOX_ERROR:
        status, code = "Error", None
    else:
        status = "Finished"
        code = step.exit_code if step.exit_code is not None else (-step.signal if step.signal else None)
    return CommandRunResult(
        status=status, execution_time=round(step.wall_ms / 1000.0, 6), return_code=code,
        stdout=step.stdout, stderr=step.stderr,
    )  # fmt: skip


def response_of(reply: RunReply) -> RunCodeResponse:
    """The HTTP answer for a reply (SandboxFusion's ``parse_run_status``: Error first, then TLE or non-zero)."""
    compiled = command_result(reply.compile) if reply.compile is not None else None
    ran = command_result(reply.run) if reply.run is not None else None
    notes = "; ".join(reply.notes)
    if reply.error_kind is not None:
        status: Literal["Success", "Failed", "SandboxError"] = "SandboxError"
        message = reply.error or reply.error_kind
    else:
        steps = [r for r in (compiled, ran) if r is not None]
        errors = [r for r in steps if r.status == "Error"]
        if errors:
            status, message = "SandboxError", errors[0].stderr or "the sandbox failed"
        elif any(r.status == "TimeLimitExceeded" for r in steps) or any(r.return_code != 0 for r in steps):
            status, message = "Failed", notes
        elif not steps:
            status, message = "SandboxError", "the executor returned no result"
        else:
            status, message = "Success", notes
    return RunCodeResponse(
        status=status, message=message, compile_result=compiled, run_result=ran, executor_pod_name=reply.worker,
        files=dict(reply.files),
    )  # fmt: skip

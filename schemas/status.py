"""How a sandbox run ended: one vocabulary for the backends, the grader, the events and an agent's steps.

Why here: the backends decide a status (``workers.sandbox``), result events carry it (``SandboxRun.status``),
a grading run adds why its program never ran (``CompileFailure``: a program in a compiled language did not
build; ``unsupported_language``: the suite does not take its language; together a ``RunStatus``), and an
agent's observation adds ``rejected`` (``schemas.episodes``); one definition keeps them equal. On the wire a
status is its plain string, and the JSON Schema lists the strings inline.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Final, Literal, get_args

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema
from pydantic_core import PydanticCustomError


class SandboxStatus(StrEnum):
    """How a run ended, decided from outside the sandbox; only ``sandbox_error`` is the infrastructure's fault."""

    OK = "ok"
    NONZERO_EXIT = "nonzero_exit"
    TIMEOUT = "timeout"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    KILLED = "killed"
    CRASHED = "crashed"
    SANDBOX_ERROR = "sandbox_error"


class CompileFailure(StrEnum):
    """How a program in a compiled language failed to build, so nothing ran: the candidate's failure, never
    ``sandbox_error`` (the compiler failed, crashed, ran out of memory or output, built nothing, or ran out of
    time)."""

    COMPILE_ERROR = "compile_error"
    COMPILE_TIMEOUT = "compile_timeout"


#: A grading run of suites that do not take the solution's language (call and assert suites call a Python
#: function; an io suite may list its languages): nothing ran, the candidate's failure, never ``sandbox_error``.
UNSUPPORTED_LANGUAGE: Final = "unsupported_language"
UnsupportedLanguage = Literal["unsupported_language"]
#: How a compile step ended: ``ok`` (there is a program to run) or how the build failed.
CompileStatus = Literal[SandboxStatus.OK] | CompileFailure
#: How a grading run ended: the sandbox's status, or why the program never ran (its build failed, or the suite
#: does not take its language).
RunStatus = SandboxStatus | CompileFailure | UnsupportedLanguage

#: The status of an action that was not carried out (nothing ran): an agent's step or observation only.
REJECTED: Final = "rejected"
Rejected = Literal["rejected"]


def _exactly(values: tuple[str, ...]) -> PlainValidator:
    """Validation of exactly these strings (a ``SandboxStatus`` value comes out as its member), worded as a
    ``Literal`` of them is: a status is never coerced, in Python as on the wire."""
    quoted = [repr(v) for v in values]
    expected = ", ".join(quoted[:-1]) + f" or {quoted[-1]}"

    # each value's parse, made once (an enum's call on every result was most of this validator's cost)
    parsed: dict[str, SandboxStatus | CompileFailure | str] = {
        v: SandboxStatus(v) if v in _SANDBOX else v if v in (REJECTED, UNSUPPORTED_LANGUAGE) else CompileFailure(v)
        for v in values
    }

    def parse(value: object) -> SandboxStatus | CompileFailure | str:
        out = parsed.get(value) if isinstance(value, str) else None
        if out is not None:
            return out
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})

    return PlainValidator(parse)


def _listed(values: tuple[str, ...]) -> WithJsonSchema:
    return WithJsonSchema({"enum": list(values), "type": "string"})


#: Dumped as its plain string, in Python as in JSON (what a consumer of ``model_dump`` always got).
_AS_STRING = PlainSerializer(str, return_type=str)


_SANDBOX = tuple(s.value for s in SandboxStatus)
_RUN = (*_SANDBOX, *(s.value for s in CompileFailure), UNSUPPORTED_LANGUAGE)
_OBSERVATION = (*_SANDBOX, REJECTED)
#: A model field holding a ``SandboxStatus``.
SandboxStatusField = Annotated[SandboxStatus, _exactly(_SANDBOX), _AS_STRING, _listed(_SANDBOX)]
#: A model field holding a ``RunStatus`` (a grading run's: the sandbox's status, or why nothing ran).
RunStatusField = Annotated[RunStatus, _exactly(_RUN), _AS_STRING, _listed(_RUN)]
#: How an agent's step ended, as its observation says: the sandbox's status, or ``rejected``.
ObservationStatus = Annotated[SandboxStatus | Rejected, _exactly(_OBSERVATION), _AS_STRING, _listed(_OBSERVATION)]


#: What part of the host failed a ``sandbox_error`` run (``workers.sandbox.error_kinds`` tells it from the run's
#: error text): the bounded label of ``rewardstream_sandbox_errors_total``.
SandboxErrorKind = Literal["host_contention", "not_started", "admission", "shutdown", "daemon", "exception", "other"]
SANDBOX_ERROR_KINDS: tuple[SandboxErrorKind, ...] = get_args(SandboxErrorKind)

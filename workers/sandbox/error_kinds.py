"""What part of the host failed a ``sandbox_error`` run, as one of a few words: the label its metric is counted by.

Why from the text: a run's error travels as text (``SandboxRun.error``, for SREs) from every backend and layer; the
texts this code writes start with the constants below (the backends use them), and an exception's text starts with
its class name. The label is bounded (never the text itself), so a candidate cannot grow the metric's series.
"""

from __future__ import annotations

import re

from guest.clock import CONTENTION
from schemas.status import SandboxErrorKind

#: The openings of the texts the backends write when the run is refused or never begins.
CLOSED = "sandbox is closed"
NOT_STARTED = "sandbox did not start"
SLOTS = "sandbox slots"
ADMISSION = "admission"


_OPENINGS: tuple[tuple[str, SandboxErrorKind], ...] = (
    (CONTENTION, "host_contention"),
    (NOT_STARTED, "not_started"),
    (SLOTS, "admission"),
    (ADMISSION, "admission"),
    (CLOSED, "shutdown"),
)
#: docker SDK errors: the daemon (or its API) failed, not the machinery of ours around it.
_DAEMON = frozenset({"APIError", "DockerException", "NotFound", "ImageNotFound", "ContainerError", "BuildError"})
_EXCEPTION = re.compile(r"([A-Z]\w*(?:Error|Exception|Exit|Timeout|Interrupt))\b")


def sandbox_error_kind(error: str | None) -> SandboxErrorKind:
    """The kind of a ``sandbox_error`` run's error text (``other`` when it says nothing known)."""
    text = (error or "").lstrip()
    for opening, kind in _OPENINGS:
        if text.startswith(opening):
            return kind
    match = _EXCEPTION.match(text)
    if match is None:
        return "other"
    return "daemon" if match.group(1) in _DAEMON else "exception"

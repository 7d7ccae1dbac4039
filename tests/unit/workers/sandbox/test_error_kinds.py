"""A ``sandbox_error`` text to its kind: the texts the backends write, exceptions by class, and anything else
bounded to ``other`` (a candidate's output cannot grow the metric's label set)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from guest.clock import Limit
from schemas.status import SANDBOX_ERROR_KINDS
from workers.sandbox.common import error_result
from workers.sandbox.error_kinds import ADMISSION, CLOSED, NOT_STARTED, SLOTS, sandbox_error_kind


def test_the_texts_the_backends_write() -> None:
    starved = Limit(2.0, started=0.0)
    starved.reason = "host"
    starved.host_wait_s, starved.wall_s = 30.0, 31.0
    cases = {
        starved.stop_text(): "host_contention",  # what a run the host starved past its ceiling says
        f"{NOT_STARTED} (exit 125): docker: Error response from daemon": "not_started",
        f"{NOT_STARTED} (no hello): bwrap: setting up uid map: Permission denied": "not_started",
        f"{SLOTS}: TimeoutError: no slot in 30 s": "admission",
        f"{ADMISSION}: the fleet's start rate is spent": "admission",
        CLOSED: "shutdown",
        "APIError: 500 Server Error for http+docker://localhost/v1.47/containers/create": "daemon",
        "DockerException: Error while fetching server API version": "daemon",
        "OSError: [Errno 24] Too many open files": "exception",
        "TimeoutError: ": "exception",
        "the harness said nothing": "other",
        "": "other",
    }
    for text, kind in cases.items():
        assert sandbox_error_kind(text) == kind, text
        assert sandbox_error_kind(error_result("process", text).error) == kind, text
    assert sandbox_error_kind(None) == "other"


@given(st.text(max_size=200))
def test_any_text_has_one_of_the_kinds(text: str) -> None:
    assert sandbox_error_kind(text) in SANDBOX_ERROR_KINDS

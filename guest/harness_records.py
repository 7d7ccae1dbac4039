"""What the grading harness writes on its stdout: nonce-framed records, each case's once.

Why: only the parent writes to stdout; each record is ``\\n@@RS1 <nonce> <json>\\n`` written with ``writev``
so the nonce is never copied, and a record the candidate's value made unencodable or too big becomes that
case's failure, never the harness's.

Guest code (standard library only), spliced into the grading harness (``harness``).
"""

from __future__ import annotations

import os

from guest.candidate_server import sweep_strays
from guest.child_pipes import bound_dumps, bound_write_all
from guest.clock import HOST, ProcLimit
from guest.framing import MAGIC


def stopped_record(cid: str, reason: str, limit: ProcLimit) -> dict[str, object]:
    """The record of a case its limit stopped; ``contention`` marks one the host starved."""
    record: dict[str, object] = {"id": cid, "ok": False, "error": limit.limit.stop_text(), **limit.limit.figures()}
    if reason == HOST:
        record["contention"] = True
    return record


class Emitter:
    """Writes nonce-framed records to stdout (fd 1) with ``writev``, so the nonce is never copied."""

    def __init__(self, nonce: bytearray, budget: int) -> None:
        self.nonce = nonce
        self.budget = budget

    def encode(self, record: dict[str, object]) -> bytes:
        """The JSON body of one record, charged to the budget; one that cannot be encoded or does not fit
        becomes its case's failure (a value the candidate forged must never stop the harness)."""
        try:
            body = bound_dumps(record, separators=(",", ":"), allow_nan=False).encode()
        except (ValueError, TypeError, RecursionError, OverflowError):
            body = _failure_body(record, "result could not be encoded")
        if len(body) > self.budget:
            body = _failure_body(record, "harness output budget exceeded")
        self.budget -= len(body)
        return body

    def emit(self, record: dict[str, object]) -> None:
        """Write one record, framed."""
        body = self.encode(record)
        parts: list[bytes | bytearray] = [b"\n" + MAGIC + b" ", self.nonce, b" ", body, b"\n"]
        total = sum(len(p) for p in parts)
        written = os.writev(1, parts)
        if written < total:  # rare partial write on a pipe: finish it byte-exactly
            rest = memoryview(b"".join(bytes(p) for p in parts))[written:]
            bound_write_all(1, rest)


def _failure_body(record: dict[str, object], why: str) -> bytes:
    """A case's failure record in place of ``record`` (its suite and id only when they are what they seem)."""
    suite, cid = record.get("suite"), record.get("id")
    failure = {"suite": suite if type(suite) is int else None, "id": cid if type(cid) is str else None}
    return bound_dumps({**failure, "ok": False, "error": why}, separators=(",", ":")).encode()


class SuiteRecords:
    """The records of one suite: each case is reported once, and ``fail_rest`` reports every case the
    suite did not get to (so whatever stopped it, each case still has its one record)."""

    def __init__(self, out: Emitter, sid: int, case_ids: list[str]) -> None:
        self.out = out
        self.sid = sid
        self.case_ids = case_ids
        self.reported: set[str] = set()

    def case(self, record: dict[str, object]) -> None:
        """Report one case, then end whatever it left running (``sweep_strays``): nothing a case started
        works on in the background of the next one."""
        cid = record.get("id")
        if type(cid) is str and cid not in self.reported:
            self.reported.add(cid)
            self.out.emit({"suite": self.sid, **record})
        sweep_strays()

    def fail_rest(self, why: str) -> None:
        for cid in self.case_ids:
            self.case({"id": cid, "ok": False, "error": why})

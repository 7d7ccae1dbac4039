"""The pipes between the grading harness and its candidate children: length-prefixed messages, and the
candidate's own stdout/stderr, read with caps.

Why: the parent (``harness``) never runs candidate code, but reads everything a child writes; the child can
write anything on its pipes, so every read is bounded (``MAX_MESSAGE_BYTES``, a time limit) and every message
is parsed as strict JSON. What candidate processes print goes to pipes the parent drains whenever it waits
(never to the parent's stdout, the protocol channel); ``Capture`` keeps the last bytes of each stream.

Guest code (standard library only), spliced into the grading harness (``harness``).
"""

from __future__ import annotations

import functools
import json
import os
import select
import time

from guest.clock import ProcLimit
from guest.plumbing import b64
from guest.typed_values import HarnessError, NonPlainError, strict_loads, type_name

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from guest.harness_records import Emitter

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
MAX_ERROR_CHARS = 2000

# Bound before any candidate code runs, so a child that monkey-patches os/json only breaks itself (the
# parent re-validates everything a child sends, so this is robustness, not the security argument).
_write = os.write
bound_read = os.read
bound_dumps = json.dumps


def bound_write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    # Not plumbing.write_all: this one writes with ``_write``, bound before any candidate code runs.
    view = memoryview(data)
    while view:
        n = _write(fd, view)
        view = view[n:]


def quietly(fn: Callable[[], object]) -> None:
    """Run ``fn`` ignoring OSError (cleanup of processes/fds that may already be gone)."""
    try:  # noqa: SIM105 - contextlib is not imported here (start-up cost)
        fn()
    except OSError:
        pass


def send_msg(fd: int, obj: object) -> None:
    """Length-prefixed JSON message on a pipe."""
    body = bound_dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    bound_write_all(fd, len(body).to_bytes(4, "big") + body)


def _read_n(fd: int, n: int, limit: ProcLimit | None, sink: OutputPipes | None = None) -> bytes | None:
    """Exactly ``n`` bytes, or None on EOF or once ``limit`` says stop; ``sink``'s pipes are drained while
    waiting."""
    chunks: list[bytes] = []
    left = n
    while left > 0:
        if limit is not None:
            if limit.poll() is not None:
                return None
            watch = [fd, *sink.fds] if sink is not None else [fd]
            ready, _, _ = select.select(watch, [], [], limit.next_wait())
            if not ready:
                continue
            if sink is not None:
                for other in ready:
                    if other != fd:
                        sink.pump(other)
                if fd not in ready:
                    continue
        chunk = bound_read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv_msg(fd: int, limit: ProcLimit | None, sink: OutputPipes | None = None) -> object:
    """One length-prefixed JSON message; raises HarnessError on EOF, a limit reached, oversize or bad JSON."""
    head = _read_n(fd, 4, limit, sink)
    if head is None:
        raise HarnessError("no reply (process died or time limit reached)")
    size = int.from_bytes(head, "big")
    if size > MAX_MESSAGE_BYTES:
        raise HarnessError("reply too large")
    body = _read_n(fd, size, limit, sink)
    if body is None:
        raise HarnessError("truncated reply (process died or time limit reached)")
    return parse_msg(body)


def parse_msg(body: bytes) -> object:
    """The JSON of one message body; HarnessError for anything that is not strict JSON (bad UTF-8 too)."""
    try:
        return strict_loads(body)
    except (ValueError, RecursionError, NonPlainError) as exc:
        raise HarnessError("unparsable reply") from exc


def check_reply(reply: object) -> dict[str, Any]:
    """A candidate process's reply as the parent accepts it: an object whose ``ok`` is a bool."""
    if not isinstance(reply, dict) or type(reply.get("ok")) is not bool:
        raise HarnessError("malformed reply")
    return reply


class Capture:
    """The candidate's stdout and stderr as the parent reads them from its children: the last ``cap`` bytes
    of each stream and how many bytes were written in all."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept = (bytearray(), bytearray())
        self.total = [0, 0]

    def add(self, stream: int, chunk: bytes) -> None:
        self.total[stream] += len(chunk)
        buf = self.kept[stream]
        buf += chunk
        if len(buf) > 2 * self.cap:  # trimmed in batches: appending stays linear
            del buf[: len(buf) - self.cap]

    def emit(self, out: Emitter) -> None:
        """An ``output`` record for stdout, then stderr, each cut to fit what is left of the output budget;
        none for a stream nothing was written to (the ``done`` record after them says the report is whole)."""
        for stream, name in enumerate(("stdout", "stderr")):
            buf = self.kept[stream]
            if not self.total[stream]:
                continue
            room = (out.budget - 1024) // (2 - stream)  # stdout leaves half for stderr; 1 KiB for the rest
            keep = max(0, min(self.cap, len(buf), room * 3 // 4 - 64))
            data = bytes(buf[len(buf) - keep :])
            out.emit({"output": name, "b64": b64(data), "bytes": self.total[stream]})


class OutputPipes:
    """Parent-side read ends of one child's stdout and stderr pipes, feeding a ``Capture``."""

    def __init__(self, capture: Capture, out_r: int, err_r: int) -> None:
        self.capture = capture
        self.streams = {out_r: 0, err_r: 1}
        self.fds = [out_r, err_r]

    def pump(self, fd: int) -> None:
        """Read what is there (the fd was reported readable); EOF closes it."""
        try:
            chunk = bound_read(fd, 1 << 16)
        except OSError:
            chunk = b""
        if chunk:
            self.capture.add(self.streams[fd], chunk)
        else:
            self._close(fd)

    def finish(self) -> None:
        """After the child is dead: read what is left, then close. Bounded, should an escaped grandchild
        still hold a pipe (it may keep writing): at most 0.5 s or 4 caps. The time is checked after a read, not
        before: a parent the host kept off the CPU past it still reads what the pipes hold."""
        stop = time.monotonic() + 0.5
        budget = 4 * self.capture.cap
        while self.fds and budget > 0:
            ready, _, _ = select.select(self.fds, [], [], 0.02)
            if not ready:
                break
            for fd in ready:
                before = sum(self.capture.total)
                self.pump(fd)
                budget -= sum(self.capture.total) - before
            if time.monotonic() >= stop:
                break
        for fd in list(self.fds):
            self._close(fd)

    def _close(self, fd: int) -> None:
        if fd in self.fds:
            self.fds.remove(fd)
            quietly(functools.partial(os.close, fd))


def short_text(text: str) -> str:
    return (
        text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS // 2] + " ... " + text[-MAX_ERROR_CHARS // 2 :]
    )


def describe_exc(exc: BaseException) -> str:
    """Traceback text of a candidate exception, never raising (its __str__ may be hostile)."""
    try:
        import traceback  # only when a candidate raised (start-up cost)

        return short_text("".join(traceback.format_exception(exc)))
    except BaseException:
        return type_name(exc)

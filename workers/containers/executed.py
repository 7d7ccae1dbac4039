"""A command run in an image task's sandbox, as a value: how it ended, its exit code, the first bytes of its two
streams and their whole lengths; the same for a container (docker backend) and an overlay run (process backend)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: How a command in the container ended: on its own, past its timeout, over the container's storage, or over
#: the output a host reads of it (``OUTPUT_LIMIT_BYTES``).
Ended = Literal["finished", "timeout", "storage", "output"]
#: Bytes of a command's stdout and stderr together past which it is killed: what is kept is cut to its cap anyway,
#: and an endless writer would keep a host thread reading until the command's timeout.
OUTPUT_LIMIT_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class Executed:
    """A command run in the sandbox: how it ended, its exit code (None unless it finished), the first bytes
    of its stdout and stderr and how many bytes each had."""

    ended: Ended
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    stdout_bytes: int
    stderr_bytes: int


class Captured:
    """The first ``cap`` bytes of each of a command's two streams, and their whole lengths."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.parts: tuple[bytearray, bytearray] = (bytearray(), bytearray())
        self.sizes = [0, 0]

    def add(self, *chunks: bytes | None) -> None:
        """Keep what fits of ``chunks`` (stdout's, stderr's); OutputOverError past ``OUTPUT_LIMIT_BYTES``."""
        for i, chunk in enumerate(chunks):
            if chunk:
                self.sizes[i] += len(chunk)
                room = self.cap - len(self.parts[i])
                if room > 0:
                    self.parts[i].extend(chunk[:room])
        if sum(self.sizes) > max(OUTPUT_LIMIT_BYTES, 2 * self.cap):
            raise OutputOverError

    def result(self) -> tuple[bytes, bytes, int, int]:
        return bytes(self.parts[0]), bytes(self.parts[1]), self.sizes[0], self.sizes[1]


class OutputOverError(Exception):
    """A command wrote more output than a host reads of it."""

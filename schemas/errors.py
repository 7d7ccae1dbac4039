"""The one exception hierarchy: every error rewardstream raises derives from RewardstreamError.

Errors caused by a Kafka message carry its topic/partition/offset so an SRE can find it; messages never
contain secrets.
"""

from __future__ import annotations


class RewardstreamError(Exception):
    """Root of every rewardstream error."""

    def __init__(
        self,
        message: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.topic = topic
        self.partition = partition
        self.offset = offset

    def __str__(self) -> str:
        if self.topic is None:
            return self.message
        where = f"{self.topic}[{self.partition}]@{self.offset}"
        return f"{self.message} (at {where})"


class HandlerCrashError(RewardstreamError):
    """Handling one message raised unexpectedly (a bug, not the message's content); it is dead-lettered and the
    consumer goes on."""


class ConfigError(RewardstreamError):
    """Settings are missing, malformed or point at something unusable."""


class PlatformError(RewardstreamError):
    """A local service could not be installed, started, stopped or reached."""


class ValidationError(RewardstreamError):
    """An event or task does not match its contract; the message names the field path."""


class SandboxError(RewardstreamError):
    """The sandbox infrastructure (not the program under test) failed."""


class KafkaError(RewardstreamError):
    """A Kafka client operation failed."""


class KafkaUnavailableError(KafkaError):
    """The cluster did not answer in time (a node down, its controller or a leader moving): the same request
    may succeed later; nothing is wrong with it."""


#: What ``exception_line`` keeps of an exception's message: enough to name the cause in a log line or an error.
ONE_LINE_CHARS = 300


def exception_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (cut), for a warning or an error that wraps ``exc``."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:ONE_LINE_CHARS]}"

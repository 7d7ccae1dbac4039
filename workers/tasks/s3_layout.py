"""Where the S3 task registry keeps each object, and the checks on every object read back from it.

The keys are ``schemas.registry_s3`` (``RegistryLocation``: the SDK reads the pointers too). Under
``s3://<bucket>/<prefix>``::

    public/latest/<name>              the latest version, 64 hex digits: overwritten by a load, last
    public/history/<name>             every version, oldest first, one a line: written before the pointer
    public/versions/<name>/<v>.json   the public view of version <v> (with its task_version): never changes
    hidden/versions/<name>/<v>.json   the full task of version <v>, its bytes' sha256 is <v>: never changes

Why two top-level prefixes: a bucket policy grants ``public/*`` to every worker and ``hidden/*`` to the
verifiers alone (``workers.tasks.s3_policy``), so the hidden tests are out of reach of the executors' and
trainers' credentials, as the directory registry's 0700 ``hidden/`` is out of reach of the sandbox user.
``<name>`` is the task id quoted as in the directory registry (``schemas.registry_layout.file_stem``).

Why every read is checked here: an object in a bucket can be anything (a partial copy, a hand edit, another
tool's file under the same prefix), and a worker must refuse it with a reason rather than grade against it.
Each decoder raises ``CorruptObjectError`` (one line, naming the object) and nothing else.
"""

from __future__ import annotations

import hashlib

from schemas.caps import QUOTE_CHARS
from schemas.codec import DecodeError, decode
from schemas.errors import RewardstreamError
from schemas.registry_layout import is_version
from schemas.registry_s3 import pointer_version
from schemas.tasks import PublicTask, Task

#: A history is one version a line.
HISTORY_MAX = 65 * 100_000


class CorruptObjectError(RewardstreamError):
    """An object of the registry is not what its key says it is (not a task, another version, not a pointer)."""


def _where(key: str) -> str:
    return key[:QUOTE_CHARS]


def decode_pointer(data: bytes, key: str) -> str:
    """The version a ``latest`` object names."""
    version = pointer_version(data)
    if version is None:
        raise CorruptObjectError(f"{_where(key)} is not a task version pointer ({len(data)} bytes, not 64 hex digits)")
    return version


def encode_history(versions: list[str]) -> bytes:
    return "".join(f"{v}\n" for v in versions).encode("ascii")


def decode_history(data: bytes, key: str) -> list[str]:
    """The versions a ``history`` object lists, oldest first (each once)."""
    if len(data) > HISTORY_MAX:
        raise CorruptObjectError(f"{_where(key)} is not a task's version history ({len(data)} bytes, too long)")
    lines = data.decode("ascii", "replace").split()
    if not lines or not all(is_version(line) for line in lines) or len(set(lines)) != len(lines):
        raise CorruptObjectError(f"{_where(key)} is not a task's version history (one version a line, each once)")
    return lines


def decode_public(data: bytes, key: str, version: str) -> PublicTask:
    """The public view of ``version`` that ``key`` holds."""
    try:
        view = decode(data, PublicTask)
    except DecodeError as exc:
        raise CorruptObjectError(f"{_where(key)} is not a public task view: {_first_line(exc)}") from None
    if view.task_version != version:
        raise CorruptObjectError(f"{_where(key)} is not the public view of version {version}")
    return view


def decode_full(data: bytes, key: str, version: str) -> Task:
    """The full task of ``version`` that ``key`` holds: its bytes' digest must be the version."""
    if hashlib.sha256(data).hexdigest() != version:
        raise CorruptObjectError(f"{_where(key)} does not hold version {version} (its digest differs)")
    try:
        return decode(data, Task)
    except DecodeError as exc:
        raise CorruptObjectError(f"{_where(key)} is not a task: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:QUOTE_CHARS]

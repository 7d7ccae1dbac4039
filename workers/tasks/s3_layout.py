"""Where the S3 task registry keeps each object, and the checks on every object read back from it.

Under ``s3://<bucket>/<prefix>``::

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
import re
from dataclasses import dataclass
from urllib.parse import unquote

from schemas.caps import QUOTE_CHARS
from schemas.codec import DecodeError, decode
from schemas.errors import ConfigError, RewardstreamError
from schemas.registry_layout import HIDDEN_DIR, PUBLIC_DIR, VERSIONS_DIR, file_stem, is_version
from schemas.tasks import PublicTask, Task

LATEST_DIR = "latest"
HISTORY_DIR = "history"
#: A pointer is 64 hex digits and a newline; a history one such line per version.
POINTER_MAX = 128
HISTORY_MAX = 65 * 100_000
#: S3 bucket names (the rules every S3 service shares): 3-63 characters, lowercase, digits, dots, hyphens.
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class CorruptObjectError(RewardstreamError):
    """An object of the registry is not what its key says it is (not a task, another version, not a pointer)."""


@dataclass(frozen=True, slots=True)
class RegistryLocation:
    """A registry's bucket and key prefix (``s3://bucket/prefix``; the prefix may be empty)."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> RegistryLocation:
        """``s3://bucket[/prefix]`` -> its location; ConfigError naming what is wrong."""
        if not url.startswith("s3://"):
            raise ConfigError(f"task registry {url[:QUOTE_CHARS]!r} is not an s3://bucket/prefix URL")
        bucket, _, prefix = url[5:].partition("/")
        if not _BUCKET_RE.fullmatch(bucket) or ".." in bucket:
            raise ConfigError(
                f"task registry {url[:QUOTE_CHARS]!r}: {bucket[:QUOTE_CHARS]!r} is not an S3 bucket name "
                "(3-63 lowercase letters, digits, dots and hyphens)"
            )
        prefix = prefix.strip("/")
        if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
            raise ConfigError(f"task registry {url[:QUOTE_CHARS]!r}: its prefix has an empty, '.' or '..' part")
        return cls(bucket, prefix)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def key(self, *parts: str) -> str:
        """The key of ``parts`` under the prefix."""
        return "/".join([self.prefix, *parts] if self.prefix else parts)

    def part_prefix(self, hidden: bool) -> str:
        """``<prefix>/public/`` or ``<prefix>/hidden/``: what a policy grants."""
        return self.key(HIDDEN_DIR if hidden else PUBLIC_DIR) + "/"

    def latest_dir(self) -> str:
        return self.key(PUBLIC_DIR, LATEST_DIR) + "/"

    def latest_key(self, task_id: str) -> str:
        return self.key(PUBLIC_DIR, LATEST_DIR, file_stem(task_id))

    def history_key(self, task_id: str) -> str:
        return self.key(PUBLIC_DIR, HISTORY_DIR, file_stem(task_id))

    def version_key(self, task_id: str, version: str, *, hidden: bool) -> str:
        return self.key(HIDDEN_DIR if hidden else PUBLIC_DIR, VERSIONS_DIR, file_stem(task_id), f"{version}.json")

    def task_id_of(self, latest_key: str) -> str | None:
        """The task id a key listed under ``latest_dir`` names (None for a key that names none)."""
        name = latest_key.removeprefix(self.latest_dir())
        if not name or "/" in name or name == latest_key:
            return None
        return unquote(name)


def _where(key: str) -> str:
    return key[:QUOTE_CHARS]


def decode_pointer(data: bytes, key: str) -> str:
    """The version a ``latest`` object names."""
    text = data.decode("ascii", "replace").strip() if len(data) <= POINTER_MAX else ""
    if not is_version(text):
        raise CorruptObjectError(f"{_where(key)} is not a task version pointer ({len(data)} bytes, not 64 hex digits)")
    return text


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

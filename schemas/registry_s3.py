"""Where the S3 task registry keeps each object, by key: shared by its one writer and every reader.

Why here, in the contracts: the roles read the registry through ``workers.tasks.s3_registry``, but the producers
that pin a generation to its task's latest version (the trainer SDK, ``streams`` may not import ``workers``)
read its ``latest`` pointers too. Under ``s3://<bucket>/<prefix>``::

    public/latest/<name>              the latest version, 64 hex digits: overwritten by a load, last
    public/history/<name>             every version, oldest first, one a line: written before the pointer
    public/versions/<name>/<v>.json   the public view of version <v> (with its task_version): never changes
    hidden/versions/<name>/<v>.json   the full task of version <v>, its bytes' sha256 is <v>: never changes

``<name>`` is the task id quoted as in the directory registry (``schemas.registry_layout.file_stem``); why two
top-level prefixes, and the checks on what is read back: ``workers.tasks.s3_layout``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from schemas.caps import QUOTE_CHARS
from schemas.errors import ConfigError
from schemas.registry_layout import HIDDEN_DIR, PUBLIC_DIR, VERSIONS_DIR, file_stem, is_version

LATEST_DIR = "latest"
HISTORY_DIR = "history"
#: A pointer is 64 hex digits and a newline.
POINTER_MAX = 128
#: S3 bucket names (the rules every S3 service shares): 3-63 characters, lowercase, digits, dots, hyphens.
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def pointer_version(data: bytes) -> str | None:
    """The version a ``latest`` object's bytes name, None when they name none (too long, not 64 hex digits)."""
    text = data.decode("ascii", "replace").strip() if len(data) <= POINTER_MAX else ""
    return text if is_version(text) else None


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

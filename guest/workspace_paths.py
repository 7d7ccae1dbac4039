"""Names in an agent's workspace, and the walk that moves through it one name at a time.

Why one name at a time: no call resolves a long path and nothing recurses, so a restore, a pack or a write
costs the same per entry at any depth, and nothing is ever followed that the walk did not look at.

Guest code (standard library only), spliced into the episode step runner (``step_runner``).
"""

from __future__ import annotations

import os

from guest.step_errors import StepError

#: Longest name kept in a snapshot (POSIX PATH_MAX is 4096; names in a workspace are far shorter): longer ones
#: are dropped, and say so. The host's ``snapshot`` checks names with this and ``plain_name`` too.
MAX_NAME_BYTES = 1024


def plain_name(name: str) -> bool:
    """Valid UTF-8 (it travels in JSON), no newline/CR/NUL, not too long: what a snapshot keeps (here and
    in the host's ``snapshot.pack``); other names are dropped, and say so."""
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return len(encoded) <= MAX_NAME_BYTES and not any(ch in name for ch in "\n\r\x00")


def check_path(path: object) -> list[str]:
    """The components of an agent's path, or StepError: relative, normalised, plain."""
    if type(path) is not str or not path:
        raise StepError("empty path")
    if not plain_name(path):
        raise StepError("path is not plain UTF-8 text of at most 1024 bytes")
    if path.startswith("/"):
        raise StepError("absolute path: paths are relative to the workspace")
    parts = path.split("/")
    if ".." in parts:
        raise StepError("'..' in path: it would leave the workspace")
    if "" in parts or "." in parts:
        raise StepError("path is not normalised (empty or '.' component)")
    return parts


DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Cursor:
    """The directory of the work dir a walk is in: an fd, and its path (``b""``: the work dir itself).

    Every call made through it names one entry of that directory, so an entry costs the same at any depth
    (a path re-resolved per entry, and per parent of it, made a 450-level tree's restore cubic), and it holds
    one fd however deep it goes. Going up opens ``..``: a cursor is only used while no other process runs
    (the restore before the step's command starts, the pack after the sweep), so ``..`` is where it came from.
    """

    def __init__(self) -> None:
        self.fd = os.open(".", DIR_FLAGS)
        self.path = b""

    def down(self, name: bytes) -> None:
        """Into the directory ``name`` here (never through a link: a link or a file there is an OSError)."""
        self._move(name)
        self.path = self.path + b"/" + name if self.path else name

    def up(self) -> None:
        self._move(b"..")
        self.path = self.path.rpartition(b"/")[0]

    def toward(self, target: bytes) -> None:
        """Up until ``target`` (a directory's path) is here or below; then down to it, making each directory
        on the way that is not there yet."""
        while self.path and target != self.path and not target.startswith(self.path + b"/"):
            self.up()
        if target == self.path:
            return
        for part in (target[len(self.path) + 1 :] if self.path else target).split(b"/"):
            try:  # noqa: SIM105 - contextlib is not imported here (start-up cost)
                os.mkdir(part, 0o755, dir_fd=self.fd)
            except FileExistsError:
                pass  # made before, as a parent of an earlier member
            self.down(part)

    def close(self) -> None:
        os.close(self.fd)

    def _move(self, name: bytes) -> None:
        fd = os.open(name, DIR_FLAGS, dir_fd=self.fd)
        os.close(self.fd)
        self.fd = fd

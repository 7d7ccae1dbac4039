"""What an agent changed in its workspace: the final snapshot against the original, file by file.

Why from the tars and not a checkout: both snapshots are canonical (``snapshot.pack``: regular files,
directories, links stored as links), so they are read in memory with nothing written and nothing followed;
a link is compared by its target text. What the judge reads (``judged_code``) is the changed Python files as
text, each capped, and a note for what it cannot read (binary, huge, deleted): a hostile workspace can make
the judge's input small or dull, never crash it.
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from typing import Literal

#: Notes (binary or removed files) a diff lists before it stops: the diff is for reading.
_NOTES_SHOWN = 200

#: Characters of one file, and of all files, the judge is shown.
MAX_FILE_CHARS = 64 << 10
MAX_TOTAL_CHARS = 256 << 10

ChangeKind = Literal["added", "modified", "deleted"]


@dataclass(frozen=True, slots=True)
class Change:
    """One path that differs. ``data`` is the final content of a regular file (None: deleted, or not a file)."""

    path: str
    kind: ChangeKind
    data: bytes | None


def entries(snapshot: bytes) -> dict[str, bytes | str]:
    """path -> content of a regular file (bytes) or ``"link:<target>"``/``"dir"`` (str) of a snapshot."""
    out: dict[str, bytes | str] = {}
    with tarfile.open(fileobj=io.BytesIO(snapshot), mode="r:") as tar:
        for member in tar.getmembers():
            if member.isreg():
                source = tar.extractfile(member)
                out[member.name] = source.read() if source is not None else b""
            elif member.issym():
                out[member.name] = f"link:{member.linkname}"
            else:
                out[member.name] = "dir"
    return out


def changes(original: bytes, final: bytes) -> list[Change]:
    """Every path added, modified or deleted from ``original`` to ``final`` (two snapshots), sorted."""
    return changes_between(entries(original), entries(final))


def changes_between(before: dict[str, bytes | str], after: dict[str, bytes | str]) -> list[Change]:
    """``changes`` of two snapshots already read by ``entries``."""
    out: list[Change] = []
    for path in sorted(before.keys() | after.keys()):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        kind: ChangeKind = "added" if old is None else "deleted" if new is None else "modified"
        out.append(Change(path, kind, new if isinstance(new, bytes) else None))
    return out


def judged_code(found: list[Change], first: str | None = None, first_data: bytes | None = None) -> str:
    """The changed Python files as one text for a code judge: ``first`` (the entry point's module, changed or
    not) leads, then every other added or modified ``*.py`` file, each under a ``# --- path`` line; what
    cannot be shown is listed in comments. Capped per file and in all."""
    parts: list[str] = []
    notes: list[str] = []
    shown: list[tuple[str, bytes]] = []
    if first is not None and first_data is not None:
        shown.append((first, first_data))
    shown += [(c.path, c.data) for c in found if c.path.endswith(".py") and c.path != first and c.data is not None]
    total = 0
    for path, data in shown:
        text = _text(data)
        if text is None:
            notes.append(f"# {path}: not UTF-8 text, not shown")
        elif len(text) > MAX_FILE_CHARS or total + len(text) > MAX_TOTAL_CHARS:
            notes.append(f"# {path}: {len(text)} characters, too large to show")
        else:
            total += len(text)
            parts.append(f"# --- {path}\n{text}")
    notes += [f"# {c.path}: {c.kind}" for c in found if not c.path.endswith(".py") or c.data is None]
    return "\n".join([*parts, *notes[:_NOTES_SHOWN]]) + "\n"


def _text(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text

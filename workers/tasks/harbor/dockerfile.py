"""What a task's Dockerfile says about where the agent works: the final stage's ``WORKDIR``.

Read without building, so a task's public part (and its version) is known at load on any machine; the
image built from it is checked against this (a base image with a WORKDIR of its own is the one case only
the build can tell: ``[environment] workdir`` says it then).
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass

_DIRECTIVE = re.compile(r"^#\s*escape\s*=\s*(\S)\s*$", re.IGNORECASE)
_FROM = re.compile(r"^(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)


class DockerfileError(ValueError):
    """The Dockerfile cannot be read for what the product needs from it."""


@dataclass(frozen=True, slots=True)
class Instruction:
    """One instruction: its keyword (upper case) and its arguments as written (continuations joined)."""

    keyword: str
    arguments: str


def instructions(text: str) -> list[Instruction]:
    """Every instruction of ``text``, with comments dropped and line continuations joined."""
    lines = text.splitlines()
    escape = "\\"
    for line in lines:  # parser directives come first, before any instruction or other comment
        match = _DIRECTIVE.match(line.strip())
        if match is None:
            break
        escape = match.group(1)
    out: list[Instruction] = []
    pending = ""
    for raw in lines:
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith(escape):
            pending += stripped[: -len(escape)].rstrip() + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        if whole:
            keyword, _, arguments = whole.partition(" ")
            out.append(Instruction(keyword.upper(), arguments.strip()))
    if pending.strip():
        keyword, _, arguments = pending.strip().partition(" ")
        out.append(Instruction(keyword.upper(), arguments.strip()))
    return out


def _path_argument(arguments: str) -> str:
    if arguments.startswith("["):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        if isinstance(parsed, list) and len(parsed) == 1 and isinstance(parsed[0], str):
            return parsed[0]
    return arguments.strip().strip('"')


def final_workdir(text: str) -> str | None:
    """The WORKDIR the final stage runs in (a stage ``FROM`` an earlier one starts in that one's), or None
    when the Dockerfile sets none (the base image's applies). DockerfileError for one set from a variable."""
    workdirs: dict[str, str | None] = {}
    current: str | None = None
    stage: str | None = None
    seen_from = False
    for instruction in instructions(text):
        if instruction.keyword == "FROM":
            match = _FROM.match(instruction.arguments)
            if match is None:
                raise DockerfileError(f"cannot read FROM {instruction.arguments!r}")
            seen_from = True
            base, stage = match.group(1), (match.group(2) or "").lower() or None
            current = workdirs.get(base.lower())
        elif instruction.keyword == "WORKDIR":
            path = _path_argument(instruction.arguments)
            if "$" in path:
                raise DockerfileError(
                    f"WORKDIR {path!r} uses a variable: set [environment] workdir in task.toml to the path"
                )
            current = "/" + posixpath.normpath(posixpath.join(current or "/", path)).lstrip("/")
        if stage is not None:
            workdirs[stage] = current
    if not seen_from:
        raise DockerfileError("the Dockerfile has no FROM")
    return current

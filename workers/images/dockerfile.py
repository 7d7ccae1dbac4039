"""What a task's Dockerfile says before it is built: the base images it builds ``FROM`` and the WORKDIR its
final stage runs in.

Why parse it at all: with no registry, every base must be a local image before ``docker build`` starts, and a
base that cannot be made here must refuse the task at load, naming the base, rather than fail half-way through a
build. Only literal bases are accepted: a ``FROM $IMAGE`` names nothing until build time. The WORKDIR is where
the agent works and all the verifier receives, part of the task's public view on every machine: read here, and
checked against the built image (a base with a WORKDIR of its own is what only the build can tell).
"""

from __future__ import annotations

import json
import posixpath
import re

from schemas.errors import RewardstreamError


class TaskImageError(RewardstreamError):
    """A task's image cannot be had: its Dockerfile or a base is unusable here, or its build failed."""


#: A parser directive choosing the line-continuation character (``# escape=` ``), only before any instruction.
_ESCAPE_DIRECTIVE = re.compile(r"#\s*escape\s*=\s*(\S)\s*$", re.IGNORECASE)
_DIRECTIVE = re.compile(r"#\s*[a-z]+\s*=", re.IGNORECASE)
#: The base image docker needs none for.
_SCRATCH = "scratch"


def _escape_character(lines: list[str]) -> str:
    for line in lines:
        if not _DIRECTIVE.match(line.strip()):
            break
        if match := _ESCAPE_DIRECTIVE.match(line.strip()):
            return match.group(1)
    return "\\"


def _logical_lines(text: str) -> list[str]:
    """Instruction lines with their continuations joined; comment and blank lines dropped."""
    lines = text.splitlines()
    escape = _escape_character(lines)
    joined: list[str] = []
    pending = ""
    for raw in lines:
        line = raw.strip()
        if line.startswith("#") or (pending and not line):
            continue
        if line.endswith(escape):
            pending += line[: -len(escape)] + " "
            continue
        if pending or line:
            joined.append(pending + line)
        pending = ""
    if pending.strip():
        joined.append(pending)
    return joined


def _from_image(arguments: list[str], line: str) -> tuple[str, str | None]:
    """(image, stage name or None) of a ``FROM [--platform=P] IMAGE [AS NAME]`` instruction's arguments."""
    words = list(arguments)
    while words and words[0].startswith("--"):
        if not words[0].lower().startswith("--platform="):
            raise TaskImageError(f"unsupported FROM option {words[0]!r} in {line!r} (only --platform=)")
        words.pop(0)
    if len(words) == 1:
        return words[0], None
    if len(words) == 3 and words[1].lower() == "as":
        return words[0], words[2].lower()
    raise TaskImageError(f"malformed FROM instruction {line!r}: expected FROM [--platform=P] IMAGE [AS NAME]")


def dockerfile_bases(dockerfile_text: str) -> list[str]:
    """The images a Dockerfile's stages start ``FROM``, in order, each once (earlier stages and ``scratch``
    left out). Raises TaskImageError for a Dockerfile without FROM, a malformed FROM or one that uses an ARG."""
    bases: list[str] = []
    stages: set[str] = set()
    froms = 0
    for line in _logical_lines(dockerfile_text):
        instruction, *arguments = line.split()
        if instruction.upper() != "FROM":
            continue
        image, stage = _from_image(arguments, line)
        froms += 1
        if "$" in image:
            raise TaskImageError(
                f"FROM {image} uses a build argument: only a literal base image can be built here "
                "(write the image's name in the FROM line)"
            )
        if image.lower() not in stages and image != _SCRATCH and image not in bases:
            bases.append(image)
        if stage is not None:
            stages.add(stage)
    if not froms:
        raise TaskImageError("the Dockerfile has no FROM instruction")
    return bases


def _workdir_argument(arguments: str) -> str:
    """The path of ``WORKDIR path`` or ``WORKDIR ["path"]``."""
    if arguments.startswith("["):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        if isinstance(parsed, list) and len(parsed) == 1 and isinstance(parsed[0], str):
            return parsed[0]
    return arguments.strip().strip('"')


def final_workdir(dockerfile_text: str) -> str | None:
    """The WORKDIR the final stage runs in (a stage ``FROM`` an earlier one starts in that one's), or None when
    the Dockerfile sets none (the base image's applies). TaskImageError for one set from a variable."""
    workdirs: dict[str, str | None] = {}
    current: str | None = None
    stage: str | None = None
    froms = 0
    for line in _logical_lines(dockerfile_text):
        instruction, _, rest = line.partition(" ")
        if instruction.upper() == "FROM":
            image, stage = _from_image(rest.split(), line)
            froms += 1
            current = workdirs.get(image.lower())
        elif instruction.upper() == "WORKDIR":
            path = _workdir_argument(rest.strip())
            if "$" in path:
                raise TaskImageError(
                    f"WORKDIR {path!r} uses a variable: set [environment] workdir in task.toml to the path"
                )
            current = "/" + posixpath.normpath(posixpath.join(current or "/", path)).lstrip("/")
        if stage is not None:
            workdirs[stage] = current
    if not froms:
        raise TaskImageError("the Dockerfile has no FROM instruction")
    return current

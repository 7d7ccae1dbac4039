"""A solutions file: JSONL, one ``Solution`` a line, read by ``rewardstream grade`` and ``rewardstream submit``.

Why one reader: the two commands take the same file, so one model says what a line may hold and one reader
says what is wrong with a line, by its number, whichever command reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pydantic
from pydantic import BaseModel, ConfigDict, Field

from schemas.codec import Sha256, one_line, problems_of
from schemas.errors import ConfigError, ValidationError
from schemas.suites import Language

#: The largest program a line may carry, in characters.
MAX_CODE_CHARS = 1024 * 1024


class Solution(BaseModel):
    """One line of a solutions file: a program for a task. Other keys of the line are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    task_id: str = Field(min_length=1, description="the task the program is for")
    generation_id: str = Field(min_length=1, max_length=128, description="the program's id, in its result")
    language: Language = Field("python", description="language of the code")
    code: str = Field(max_length=MAX_CODE_CHARS, description="the program")
    task_version: Sha256 | None = Field(
        None, description="the version of the task it answers (``submit``; else the latest when published)"
    )


def _must_be_text(name: str) -> str:
    """The wording of a field that is not text (or is empty where it must not be)."""
    field = Solution.model_fields[name]
    non_empty = any(getattr(rule, "min_length", 0) for rule in field.metadata)
    return f"{name} must be a {'non-empty ' if non_empty else ''}string"


def _problem(obj: dict[str, Any], exc: pydantic.ValidationError) -> str:
    """The first thing wrong with a line, in words."""
    error = exc.errors(include_url=False, include_input=False)[0]
    name = str(error["loc"][0]) if error["loc"] else ""
    if name in Solution.model_fields and (
        error["type"] in {"missing", "string_too_short"} or not isinstance(obj.get(name), str)
    ):
        return _must_be_text(name)
    return one_line(problems_of(exc, obj)[:1], "(line)")


def parse_solution(line: bytes, where: str) -> Solution:
    """One line (not blank) of a solutions file; ``ValidationError`` naming ``where`` (``path:line``) and what
    is wrong with it."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValidationError(f"{where}: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ValidationError(f"{where}: expected an object")
    try:
        return Solution.model_validate(obj)
    except pydantic.ValidationError as exc:
        raise ValidationError(f"{where}: {_problem(obj, exc)}") from None


def numbered_solutions(path: Path) -> list[tuple[int, Solution]]:
    """(line number, solution) of every line that is not blank, in order; the first bad line is an error
    naming its number (``ConfigError`` when the file cannot be read)."""
    solutions: list[tuple[int, Solution]] = []
    try:
        with path.open("rb") as fh:
            for number, line in enumerate(fh, 1):
                if line.strip():
                    solutions.append((number, parse_solution(line, f"{path}:{number}")))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return solutions

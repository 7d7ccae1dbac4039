"""Generate ``schemas/json/*.json`` (JSON Schema 2020-12) from the models, for producers in other languages.

Run ``python -m schemas.jsonschema`` after changing a model; ``--check`` exits 1 if the files are stale
(the unit tests do the same check). Cross-field rules (e.g. exactly one of ``code``/``code_ref``) are in
the models' descriptions; the Python codec enforces them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson

from schemas.audits import AUDIT_MODELS
from schemas.codec import Contract
from schemas.episodes import EPISODE_MODELS
from schemas.events import EVENT_MODELS
from schemas.runs import RUN_MODELS
from schemas.tasks import PublicTask, Task

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def default_dir() -> Path:
    """Where the generated files live: ``schemas/json`` next to this module."""
    return Path(__file__).resolve().parent / "json"


def models() -> tuple[type[Contract], ...]:
    """Every model that gets a schema file."""
    return (Task, PublicTask, *EVENT_MODELS, *EPISODE_MODELS, *RUN_MODELS, *AUDIT_MODELS)


def render(model: type[Contract]) -> str:
    """The schema document of ``model``, deterministic (sorted keys, 2-space indent, final newline)."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    schema = {
        "$schema": DIALECT,
        "$id": f"https://rewardstream.dev/schemas/{model.__name__}-{model.version_string()}.json",
        "x-rewardstream-version": model.version_string(),
        **schema,
    }
    return orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"


def render_all() -> dict[str, str]:
    """File name to content for every model."""
    return {f"{m.__name__}.json": render(m) for m in models()}


def stale_files(directory: Path) -> list[str]:
    """Names of files in ``directory`` that are missing, outdated or no longer generated."""
    wanted = render_all()
    stale = [
        name
        for name, text in wanted.items()
        if not (directory / name).is_file() or (directory / name).read_text(encoding="utf-8") != text
    ]
    extra = sorted(p.name for p in directory.glob("*.json") if p.name not in wanted) if directory.is_dir() else []
    return sorted(stale) + extra


def write_all(directory: Path) -> list[str]:
    """(Re)write every schema file, remove ones no longer generated; return the names written."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted = render_all()
    for name, text in wanted.items():
        (directory / name).write_text(text, encoding="utf-8")
    for path in directory.glob("*.json"):
        if path.name not in wanted:
            path.unlink()
    return sorted(wanted)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: write the files, or with --check report stale ones (exit 1)."""
    parser = argparse.ArgumentParser(prog="python -m schemas.jsonschema", description=__doc__)
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: schemas/json)")
    parser.add_argument("--check", action="store_true", help="exit 1 if any file is stale; write nothing")
    args = parser.parse_args(argv)
    directory: Path = args.out or default_dir()
    if args.check:
        stale = stale_files(directory)
        if stale:
            print(
                f"stale JSON Schema files in {directory}: {', '.join(stale)}; run `python -m schemas.jsonschema`",
                file=sys.stderr,
            )
            return 1
        return 0
    for name in write_all(directory):
        print(directory / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

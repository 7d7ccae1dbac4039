"""The committed JSON Schema files match the models (regenerate with ``python -m schemas.jsonschema``)."""

from __future__ import annotations

from pathlib import Path

import orjson

from schemas.jsonschema import default_dir, main, models, render_all, stale_files, write_all


def test_committed_schema_files_are_up_to_date() -> None:
    stale = stale_files(default_dir())
    assert stale == [], f"stale JSON Schema files {stale}: run `.venv/bin/python -m schemas.jsonschema`"


def test_every_model_has_a_file() -> None:
    assert sorted(render_all()) == sorted(f"{m.__name__}.json" for m in models())


def test_schemas_are_documented_and_strict() -> None:
    for name, text in render_all().items():
        schema = orjson.loads(text)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema", name
        assert schema["additionalProperties"] is False, name
        for field, spec in schema["properties"].items():
            assert spec.get("description"), f"{name}: {field} has no description"


def test_check_detects_stale_and_extra_files(tmp_path: Path) -> None:
    assert main(["--out", str(tmp_path), "--check"]) == 1
    write_all(tmp_path)
    assert main(["--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "Task.json").write_text("{}\n", encoding="utf-8")
    (tmp_path / "Old.json").write_text("{}\n", encoding="utf-8")
    assert stale_files(tmp_path) == ["Task.json", "Old.json"]

"""SRE tools without services: the Dashboards saved objects reference only fields the index template has;
``logs search`` builds the query it promises; ``submit`` names bad input lines."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from rewardstream.cli.logs import LogSearchError, build_query, since_expr
from rewardstream.cli.logs import search as search_logs
from rewardstream.cli.submit import read_solutions
from schemas.errors import ConfigError, ValidationError
from schemas.settings import OpenSearchSettings

REPO = Path(__file__).resolve().parents[4]
NDJSON = REPO / "infra" / "dashboards" / "rewardstream-logs.ndjson"
TEMPLATE = REPO / "workers" / "logs" / "index_template.json"


def template_fields() -> tuple[set[str], list[str]]:
    """Concrete field paths of the template, and the dynamic ``path_match`` patterns (e.g. ``fields.*``)."""
    template = json.loads(TEMPLATE.read_text())["template"]["mappings"]
    paths: set[str] = set()

    def walk(props: dict[str, Any], prefix: str) -> None:
        for name, spec in props.items():
            paths.add(prefix + name)
            for sub in spec.get("fields", {}):
                paths.add(f"{prefix}{name}.{sub}")
            walk(spec.get("properties", {}), f"{prefix}{name}.")

    walk(template["properties"], "")
    patterns = [next(iter(t.values()))["path_match"] for t in template["dynamic_templates"]]
    return paths, patterns


def known(field: str) -> bool:
    paths, patterns = template_fields()
    return field in paths or any(re.fullmatch(p.replace(".", r"\.").replace("*", ".*"), field) for p in patterns)


def fields_in_dsl(node: object) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("term", "terms", "range", "match", "prefix") and isinstance(value, dict):
                found |= set(value)
            elif key == "exists":
                found.add(value["field"])
            elif key == "source" and isinstance(value, str):
                found |= set(re.findall(r"doc\['([^']+)'\]", value))
            found |= fields_in_dsl(value)
    elif isinstance(node, list):
        for item in node:
            found |= fields_in_dsl(item)
    return found


def load_objects() -> list[dict[str, Any]]:
    return [json.loads(line) for line in NDJSON.read_text().splitlines() if line.strip()]


def test_saved_objects_parse_and_cover_the_sre_searches() -> None:
    objects = load_objects()
    by_type: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        assert {"type", "id", "attributes", "references"} <= set(obj), obj
        by_type.setdefault(obj["type"], []).append(obj)
    [pattern] = by_type["index-pattern"]
    prefix = OpenSearchSettings.model_fields["index_prefix"].default
    template_patterns = json.loads(TEMPLATE.read_text())["index_patterns"]
    assert pattern["attributes"]["title"] in [p.replace("__PREFIX__", prefix) for p in template_patterns]
    assert known(pattern["attributes"]["timeFieldName"])
    titles = {s["attributes"]["title"] for s in by_type["search"]}
    for wanted in ("failures by task", "sandbox errors", "timeouts", "flagged generations"):
        assert any(wanted in t for t in titles), (wanted, titles)


def test_saved_searches_reference_the_index_pattern_and_existing_fields() -> None:
    objects = load_objects()
    ids = {(o["type"], o["id"]) for o in objects}
    for search in (o for o in objects if o["type"] == "search"):
        attrs = search["attributes"]
        source = json.loads(attrs["kibanaSavedObjectMeta"]["searchSourceJSON"])
        refs = {r["name"]: (r["type"], r["id"]) for r in search["references"]}
        assert refs[source["indexRefName"]] in ids
        used = set(attrs["columns"]) | {field for field, _order in attrs["sort"]}
        used |= set(re.findall(r"([A-Za-z_][\w.]*)\s*:", source["query"]["query"]))
        used |= fields_in_dsl(source["filter"])
        unknown = sorted(f for f in used if not known(f))
        assert not unknown, f"{attrs['title']}: fields not in the index template: {unknown}"
        for flt in source["filter"]:
            assert json.loads(flt["meta"]["value"]) == flt["query"]


def test_logs_query_matches_ids_or_text_and_filters() -> None:
    body = build_query("g-123", run_id="run-1", status="timeout", since="90m", size=5)
    should = body["query"]["bool"]["must"][0]["bool"]["should"]
    assert {"term": {"generation_id": "g-123"}} in should
    assert any("simple_query_string" in s for s in should)
    assert body["query"]["bool"]["filter"] == [
        {"term": {"run_id": "run-1"}},
        {"term": {"fields.status": "timeout"}},
        {"range": {"created_at": {"gte": "now-90m"}}},
    ]
    assert body["size"] == 5
    assert build_query("*")["query"]["bool"]["must"] == [{"match_all": {}}]
    assert all(known(f) for f in fields_in_dsl(body))
    assert since_expr("2d") == "now-2d"
    with pytest.raises(ConfigError, match="--since"):
        since_expr("yesterday")


def test_submit_names_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('{"task_id": "t", "generation_id": "g1", "code": "x"}\n\n{"task_id": "t", "code": "y"}\n')
    with pytest.raises(ValidationError, match=r"s.jsonl:3: generation_id must be a non-empty string"):
        read_solutions(path)
    path.write_text(
        '{"task_id": "t", "generation_id": "g1", "code": "x"}\n{"task_id": "t", "generation_id": "g1", "code": "x"}\n'
    )
    with pytest.raises(ValidationError, match="duplicate generation_id g1"):
        read_solutions(path)


def test_submit_reads_a_language(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"task_id": "t", "generation_id": "g1", "code": "x"}\n'
        '{"task_id": "t", "generation_id": "g2", "code": "int main;", "language": "c"}\n'
    )
    assert [row.language for row in read_solutions(path)] == ["python", "c"]
    path.write_text('{"task_id": "t", "generation_id": "g1", "code": "x", "language": 3}\n')
    with pytest.raises(ValidationError, match=r"s\.jsonl:1: language must be a string"):
        read_solutions(path)


def test_submit_rejects_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(ValidationError, match="no solutions"):
        read_solutions(path)


class _FlakyIndex:
    """An OpenSearch client whose new index answers 503 (shard not started) ``failures`` times."""

    def __init__(self, failures: int, status: int = 503) -> None:
        self.failures, self.status, self.calls = failures, status, 0

    def search(self, **_kwargs: object) -> dict[str, object]:
        self.calls += 1
        if self.calls <= self.failures:
            error = RuntimeError("search_phase_execution_exception")
            error.status_code = self.status  # type: ignore[attr-defined]
            raise error
        return {"hits": {"hits": [{"_index": "p-2026.11.29", "_id": "1", "_source": {"message": "m"}}]}}


def test_logs_search_waits_for_a_just_created_index_but_not_for_other_errors() -> None:
    flaky = _FlakyIndex(failures=2)
    hits = search_logs(flaky, "p", {}, unavailable_wait_s=5.0)
    assert hits == [{"_index": "p-2026.11.29", "_id": "1", "message": "m"}]
    assert flaky.calls == 3
    with pytest.raises(LogSearchError, match="search_phase_execution_exception"):
        search_logs(_FlakyIndex(failures=100), "p", {}, unavailable_wait_s=0.5)
    refused = _FlakyIndex(failures=1, status=400)
    with pytest.raises(LogSearchError):
        search_logs(refused, "p", {}, unavailable_wait_s=5.0)
    assert refused.calls == 1

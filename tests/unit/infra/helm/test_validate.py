"""Strict schemas: unknown fields refused, CRD extensions made plain JSON Schema."""

from __future__ import annotations

from jsonschema import Draft202012Validator

from infra.helm.validate import load_manifests, strict


def test_unknown_field_refused_where_properties_are_listed() -> None:
    schema = strict(
        {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"}}}}}
    )
    assert Draft202012Validator(schema).is_valid({"a": {"b": 1}})
    assert not Draft202012Validator(schema).is_valid({"a": {"b": 1, "c": 2}})
    assert not Draft202012Validator(schema).is_valid({"z": 1})


def test_preserve_unknown_fields_and_int_or_string() -> None:
    schema = strict(
        {
            "type": "object",
            "properties": {
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {}},
                "port": {"type": "string", "x-kubernetes-int-or-string": True},
            },
        }
    )
    validator = Draft202012Validator(schema)
    assert validator.is_valid({"free": {"anything": 1}, "port": 8080})
    assert validator.is_valid({"port": "http"})
    assert not validator.is_valid({"port": 1.5})


def test_empty_documents_are_dropped() -> None:
    assert load_manifests("---\n# only a comment\n---\nkind: A\n---\n") == [{"kind": "A"}]

"""Validate rendered manifests offline: each document against the schema of its kind, strictly (an unknown field
is an error, as ``kubectl apply --validate=strict`` makes it), plus the cross-object rules the schemas cannot
say (``semantics``). Core kinds use Kubernetes' own OpenAPI v3 documents; custom kinds their CRD's
``openAPIV3Schema`` (KEDA, the Prometheus operator) or a shipped schema (Strimzi's KafkaTopic).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

from infra.helm.sources import SchemaSources

Manifest = dict[str, Any]
_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def strict(schema: Any) -> Any:
    """``schema`` with unknown fields refused wherever it lists properties (unless it keeps unknown fields), and
    CRD extensions made plain JSON Schema (``x-kubernetes-int-or-string``)."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe YAML; a bare ``=`` (YAML 1.1's value tag, in a CRD's enum of operators) is the string ``=``."""


_Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


def load_manifests(text: str) -> list[Manifest]:
    """The non-empty YAML documents of ``text``."""
    return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc]


def _group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def _openapi_file(directory: Path, group: str, version: str) -> Path:
    return directory / (f"api__{version}_openapi.json" if not group else f"apis__{group}__{version}_openapi.json")


@dataclass
class Validator:
    """Schemas by (group, version, kind), loaded on first use."""

    sources: SchemaSources
    _core: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    _crd_groups: dict[str, dict[tuple[str, str, str], dict[str, Any]]] = field(default_factory=dict)

    def _crd(self, group: str, version: str, kind: str) -> dict[str, Any] | None:
        """The CRD schema of a custom kind; each group's CRD files are read once (``<group>_<plural>.yaml``)."""
        if group not in self._crd_groups:
            self._crd_groups[group] = self._load_crds(group)
        return self._crd_groups[group].get((group, version, kind))

    def _load_crds(self, group: str) -> dict[tuple[str, str, str], dict[str, Any]]:
        found: dict[tuple[str, str, str], dict[str, Any]] = {}
        for directory in self.sources.crd_dirs:
            for path in sorted(directory.glob(f"{group}_*.yaml")):
                for crd in load_manifests(path.read_text()):
                    if crd.get("kind") != "CustomResourceDefinition":
                        continue
                    spec = crd["spec"]
                    for version in spec.get("versions", []):
                        schema = version.get("schema", {}).get("openAPIV3Schema")
                        if schema and version.get("served", True):
                            found[(spec["group"], version["name"], spec["names"]["kind"])] = schema
        for path in self.sources.extra_crd_schemas:
            shipped = json.loads(path.read_text())
            if shipped["group"] == group:
                found.update({(group, version, shipped["kind"]): shipped["schema"] for version in shipped["versions"]})
        return found

    def _components(self, group: str, version: str) -> dict[str, Any] | None:
        key = (group, version)
        if key not in self._core:
            path = _openapi_file(self.sources.openapi_dir, group, version)
            if not path.is_file():
                return None
            self._core[key] = strict(json.loads(path.read_text())["components"]["schemas"])
        return self._core[key]

    @cached_property
    def _meta(self) -> Draft202012Validator:
        components = self._components("", "v1")
        if components is None:
            raise FileNotFoundError(f"no core/v1 OpenAPI document in {self.sources.openapi_dir}")
        return Draft202012Validator({"$ref": f"#/components/schemas/{_META}", "components": {"schemas": components}})

    def _core_validator(self, group: str, version: str, kind: str) -> Draft202012Validator | None:
        components = self._components(group, version)
        if components is None:
            return None
        for name, schema in components.items():
            for gvk in schema.get("x-kubernetes-group-version-kind", []):
                if (gvk.get("group", ""), gvk["version"], gvk["kind"]) == (group, version, kind):
                    root = {"$ref": f"#/components/schemas/{name}", "components": {"schemas": components}}
                    return Draft202012Validator(root)
        return None

    def errors(self, manifest: Manifest) -> Iterator[str]:
        """What is wrong with one manifest, one line each (empty: valid)."""
        api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str):
            yield "a document without apiVersion and kind"
            return
        group, version = _group_version(api_version)
        crd = self._crd(group, version, kind) if "." in group else None
        if crd is not None:
            validator = Draft202012Validator(strict(copy.deepcopy(crd)))
            yield from _messages(self._meta.iter_errors(manifest.get("metadata", {})), "metadata")
        else:
            core = self._core_validator(group, version, kind)
            if core is None:
                yield f"no schema for {api_version} {kind} (not a Kubernetes {group or 'core'} kind, no CRD known)"
                return
            validator = core
        yield from _messages(validator.iter_errors(manifest), "")


def _messages(errors: Iterable[Any], prefix: str) -> Iterator[str]:
    for error in sorted(errors, key=lambda e: list(e.absolute_path)):
        path = ".".join(str(p) for p in [*([prefix] if prefix else []), *error.absolute_path]) or "(root)"
        yield f"{path}: {_short(error)}"


def _short(error: Any) -> str:
    """The error's message, with a oneOf/anyOf failure named by its most specific cause."""
    if error.context:
        deepest = max(error.context, key=lambda e: len(e.absolute_path))
        return str(deepest.message)
    return str(error.message)


def describe(manifest: Manifest) -> str:
    """``Kind/name`` of a manifest, for messages."""
    name = (manifest.get("metadata") or {}).get("name", "?")
    return f"{manifest.get('kind', '?')}/{name}"

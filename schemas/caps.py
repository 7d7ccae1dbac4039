"""Field caps, declared once: on the model. Producers fit their text to the cap the model declares instead of
slicing by a number written again at every call site (and drifting from the contract)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

T = TypeVar("T")


def cap(model: type[BaseModel], field: str) -> int:
    """The ``max_length`` ``model`` declares for ``field`` (on the field or in its ``Annotated`` type)."""
    info = model.model_fields[field]
    for meta in info.metadata:
        limit: Any = getattr(meta, "max_length", None)
        if isinstance(limit, int):
            return limit
    raise KeyError(f"{model.__name__}.{field} declares no max_length")


def fit(model: type[BaseModel], field: str, text: str, *, keep: Literal["head", "tail"] = "head") -> str:
    """``text`` cut to the field's cap: its start (messages) or its end (tracebacks: the cause is last)."""
    limit = cap(model, field)
    if len(text) <= limit:
        return text
    return text[:limit] if keep == "head" else text[-limit:]


def fit_list(model: type[BaseModel], field: str, items: Sequence[T]) -> list[T]:
    """The first items of ``items`` that the list field's cap allows."""
    return list(items[: cap(model, field)])

"""Field caps, declared once: on the model. Producers fit their text to the cap the model declares instead of
slicing by a number written again at every call site (and drifting from the contract)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any, Literal, TypeVar, get_args

from pydantic import BaseModel

T = TypeVar("T")

#: Characters of an untrusted or unbounded string (a path, an entry name, a reply, an exception's first line)
#: that a message quotes: enough to recognise it, never all of it. For text with no field of its own.
QUOTE_CHARS = 200
#: Bytes of a sandbox's stderr, its end, that say why the program in it never started.
STDERR_TAIL_BYTES = 300


@cache
def cap(model: type[BaseModel], field: str) -> int:
    """The ``max_length`` ``model`` declares for ``field`` (on the field or in its ``Annotated`` type); cached:
    models do not change, and the reward processor asks for every reward."""
    limit = _max_length(model.model_fields[field].metadata)
    if limit is None:
        raise KeyError(f"{model.__name__}.{field} declares no max_length")
    return limit


def item_cap(model: type[BaseModel], field: str) -> int:
    """The ``max_length`` of each item of a list field (``list[Annotated[str, StringConstraints(...)]]``)."""
    for item in get_args(model.model_fields[field].annotation):
        limit = _max_length(get_args(item)[1:])
        if limit is not None:
            return limit
    raise KeyError(f"{model.__name__}.{field} declares no max_length for its items")


def _max_length(metadata: Iterable[object]) -> int | None:
    for meta in metadata:
        limit: Any = getattr(meta, "max_length", None)
        if isinstance(limit, int):
            return limit
    return None


def fit(model: type[BaseModel], field: str, text: str, *, keep: Literal["head", "tail"] = "head") -> str:
    """``text`` cut to the field's cap: its start (messages) or its end (tracebacks: the cause is last)."""
    return _cut(text, cap(model, field), keep)


def fit_item(model: type[BaseModel], field: str, text: str) -> str:
    """``text`` cut to the cap of one item of the list field (its start)."""
    return _cut(text, item_cap(model, field), "head")


def _cut(text: str, limit: int, keep: Literal["head", "tail"]) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] if keep == "head" else text[-limit:]


def fit_list(model: type[BaseModel], field: str, items: Sequence[T]) -> list[T]:
    """The first items of ``items`` that the list field's cap allows."""
    return list(items[: cap(model, field)])

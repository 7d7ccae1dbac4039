"""Field caps come from the model: fitting text never exceeds them and keeps the end that matters."""

from __future__ import annotations

import pytest

from schemas.caps import cap, fit, fit_item, fit_list, item_cap
from schemas.events import DeadLetter, LogRecord, RewardEvent


def test_caps_are_read_from_the_fields_and_their_annotated_types() -> None:
    assert cap(LogRecord, "message") == 8192  # Field(max_length=...)
    assert cap(DeadLetter, "component") == 256  # ShortText = Annotated[str, StringConstraints(...)]
    assert cap(RewardEvent, "reasons") == 64  # a list
    with pytest.raises(KeyError, match="declares no max_length"):
        cap(LogRecord, "partition")


def test_fit_keeps_the_head_of_messages_and_the_tail_of_tracebacks() -> None:
    text = "a" * 9000 + "z"
    assert fit(LogRecord, "message", text) == text[:8192]
    assert fit(LogRecord, "exc_text", "x" * 20000 + "Error: cause", keep="tail").endswith("Error: cause")
    assert len(fit(LogRecord, "exc_text", "x" * 20000, keep="tail")) == 16384
    assert fit(LogRecord, "message", "short") == "short"
    assert fit_list(RewardEvent, "reasons", [str(i) for i in range(100)]) == [str(i) for i in range(64)]
    LogRecord(level="info", component="c", worker="w", message=fit(LogRecord, "message", text))  # valid


def test_a_list_field_caps_its_items_too() -> None:
    assert item_cap(RewardEvent, "reasons") == 1024  # list[Annotated[str, StringConstraints(max_length=...)]]
    assert fit_item(RewardEvent, "reasons", "r" * 2000) == "r" * 1024
    with pytest.raises(KeyError, match="declares no max_length for its items"):
        item_cap(RewardEvent, "flags")

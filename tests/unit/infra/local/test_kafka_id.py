"""The local Kafka's cluster id: one starting with ``-`` made ``kafka-storage format`` read it as an option."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from infra.local import kafka


def test_an_id_starting_with_a_dash_is_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    dashed = uuid.UUID(bytes=b"\xf8" + bytes(15))  # url-safe base64 of 0b111110... starts with "-"
    plain = uuid.UUID(bytes=b"\x04" + bytes(15))
    draws: Iterator[uuid.UUID] = iter((dashed, plain))
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    assert kafka.new_cluster_id() == "BAAAAAAAAAAAAAAAAAAAAA"


def test_ids_are_22_url_safe_characters_and_never_an_option() -> None:
    ids = [kafka.new_cluster_id() for _ in range(2000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    assert len(set(ids)) == len(ids)

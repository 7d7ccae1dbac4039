"""The vocabulary schemas owns is declared once: each tuple of names is its Literal, and each mapping covers it."""

from __future__ import annotations

from typing import get_args

from schemas.backends import BACKENDS, Backend
from schemas.events import InputRef, RewardEvent
from schemas.signals import SIGNAL_TOPIC, SIGNAL_TOPICS, SIGNAL_WRITER, SIGNALS, Signal, SignalTopic, WriterRole
from schemas.topics import WRITER_ROLE, Role, catalog


def test_each_name_tuple_is_its_literal() -> None:
    assert get_args(Signal) == SIGNALS
    assert get_args(SignalTopic) == SIGNAL_TOPICS
    assert get_args(Backend) == BACKENDS


def test_every_signal_has_a_topic_in_the_catalog_and_a_writer() -> None:
    assert set(SIGNAL_TOPIC) == set(SIGNALS) == set(SIGNAL_WRITER)
    assert set(SIGNAL_WRITER.values()) == set(get_args(WriterRole))
    assert set(SIGNAL_TOPICS) <= set(get_args(Role)) == {spec.role for spec in catalog()}
    assert WRITER_ROLE == {"executions": "executor", "verdicts": "verifier", "judgements": "judge"}


def test_the_wire_names_of_the_signals_are_unchanged() -> None:
    role = InputRef.model_json_schema()["properties"]["role"]
    assert role["enum"] == ["generation", "execution", "verdict", "judgement"]
    missing = RewardEvent.model_json_schema()["properties"]["missing"]
    assert missing["items"]["enum"] == ["execution", "verdict", "judgement"]

"""Pure parts of log shipping/indexing: index naming, template, retention, bulk bodies and outcomes."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

from confluent_kafka import Message

from bus.clients import next_offsets
from schemas.events import OUTPUT_TAIL_MAX_CHARS, LogRecord
from workers.logs.indexer import Backoff, bulk_body, bulk_outcome, document
from workers.logs.indices import expired, index_day, index_name, index_template, ism_policy, over_size
from workers.logs.shipper import tail


def _record(**kw: Any) -> LogRecord:
    base: dict[str, Any] = {"level": "info", "component": "executor", "worker": "h:1", "message": "ran"}
    return LogRecord(**{**base, **kw})


def test_index_name_is_the_utc_day_of_the_record_itself() -> None:
    late_local = datetime(2026, 3, 1, 1, 30, tzinfo=timezone(timedelta(hours=2)))  # 2026-02-28 23:30 UTC
    assert index_name("rs-logs", late_local) == "rs-logs-2026.02.28"
    assert index_day("rs-logs", "rs-logs-2026.02.28") == date(2026, 2, 28)
    assert index_day("rs-logs", "rs-logs-other-2026.02.28") is None
    assert index_day("rs-logs", "rs-logs-2026.02.31") is None


def test_retention_deletes_only_own_daily_indices_past_the_cutoff() -> None:
    names = ["l-2026.01.01", "l-2026.01.10", "l-2026.01.11", "l-x-2026.01.01", "other-2026.01.01", "l-template"]
    assert expired("l", names, retention_days=10, today=date(2026, 1, 21)) == ["l-2026.01.01", "l-2026.01.10"]


def test_size_cap_deletes_the_oldest_days_until_the_total_fits_never_today() -> None:
    today = date(2026, 1, 21)
    sizes = {"l-2026.01.18": 40, "l-2026.01.19": 30, "l-2026.01.20": 20, "l-2026.01.21": 10, "l-notes": 5}
    assert over_size("l", sizes, max_bytes=0, today=today) == [], "0 is no cap"
    assert over_size("l", sizes, max_bytes=105, today=today) == []
    assert over_size("l", sizes, max_bytes=104, today=today) == ["l-2026.01.18"]
    assert over_size("l", sizes, max_bytes=35, today=today) == ["l-2026.01.18", "l-2026.01.19"]
    assert over_size("l", sizes, max_bytes=1, today=today) == ["l-2026.01.18", "l-2026.01.19", "l-2026.01.20"], (
        "today's index (and what is not a daily index) stays even over the cap"
    )


def test_template_and_policy_are_bound_to_the_prefix() -> None:
    template = index_template("rs-logs", replicas=0)
    assert template["index_patterns"] == ["rs-logs-*"]
    assert template["template"]["settings"]["index"]["number_of_replicas"] == 0
    props = template["template"]["mappings"]["properties"]
    assert props["generation_id"]["type"] == "keyword"
    assert props["message"]["type"] == "text"
    assert props["created_at"]["type"] == "date"
    assert props["offset"]["type"] == "long"
    assert set(LogRecord.model_fields) <= set(props), "every LogRecord field needs an explicit mapping"
    policy = ism_policy("rs-logs", 7)["policy"]
    assert policy["states"][0]["transitions"][0]["conditions"]["min_index_age"] == "7d"
    assert policy["ism_template"][0]["index_patterns"] == ["rs-logs-*"]


def test_bulk_body_uses_the_stable_record_id_and_day_index() -> None:
    record = _record(created_at=datetime(2026, 5, 4, 12, tzinfo=UTC), generation_id="g1")
    body = bulk_body("p", [(record, document(record, None))])
    assert body[0] == {"index": {"_index": "p-2026.05.04", "_id": record.event_id}}
    assert body[1]["generation_id"] == "g1"
    assert "indexed_at" in body[1]
    again = bulk_body("p", [(record, document(record, None))])
    assert again[0] == body[0], "a re-delivered record must target the same document"


def test_bulk_outcome_separates_retries_from_rejections() -> None:
    response = {
        "errors": True,
        "items": [
            {"index": {"status": 201}},
            {"index": {"status": 429, "error": {"type": "es_rejected_execution_exception"}}},
            {"index": {"status": 400, "error": {"type": "mapper_parsing_exception", "reason": "bad field"}}},
            {"index": {"status": 200}},
            {"index": {"status": 503}},
        ],
    }
    outcome = bulk_outcome(response)
    assert outcome.indexed == 2
    assert outcome.retry == [1, 4]
    assert list(outcome.rejected) == [2]
    assert "mapper_parsing_exception" in outcome.rejected[2]
    assert "bad field" in outcome.rejected[2]


def test_backoff_doubles_to_the_cap_and_resets() -> None:
    backoff = Backoff(0.5, 3.0)
    assert [backoff.next_delay() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next_delay() == 0.5


def test_next_offsets_commits_one_past_the_highest_per_partition() -> None:
    msgs = [
        Message(topic="t", partition=0, offset=5),
        Message(topic="t", partition=1, offset=2),
        Message(topic="t", partition=0, offset=7),
        Message(topic="t", partition=0, offset=6),
    ]
    assert [(tp.topic, tp.partition, tp.offset) for tp in next_offsets(msgs)] == [("t", 0, 8), ("t", 1, 3)]


def test_tail_keeps_the_end_of_long_output() -> None:
    assert tail("short") == ("short", False)
    text = "a" * OUTPUT_TAIL_MAX_CHARS + "END"
    kept, cut = tail(text)
    assert cut
    assert kept.endswith("END")
    assert len(kept) == OUTPUT_TAIL_MAX_CHARS

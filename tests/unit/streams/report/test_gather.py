"""A run's numbers from its raw records: only the run's, the first reward of each generation, every class counted."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

from streams.report.gather import NoRewardsError, Raw, RunRecords, gather, natural_key, outcome, percentile
from tests.unit.report_events import CANARY_TASK, TASKS, Message, sample_run

START = datetime(2026, 12, 5, tzinfo=UTC)


def records(messages: list[Message]) -> RunRecords:
    by: dict[str, list[Raw]] = {"rewards": [], "generations": [], "executions": [], "verdicts": []}
    for message in messages:
        by[message.role].append(Raw(0, message.value))
    return RunRecords(by["rewards"], by["generations"], by["executions"], by["verdicts"], {"rewards": 7})


def rewards_of(messages: list[Message]) -> list[dict[str, object]]:
    return [orjson.loads(m.value) for m in messages if m.role == "rewards"]


def test_a_run_is_read_alone_and_whole() -> None:
    mine, other = sample_run("run-a", START), sample_run("run-b", START, generations=10)
    report = gather("run-a", records(mine + other + [Message("rewards", b"k", b"not json")]))
    assert len(report.rows) == len(rewards_of(mine)) == 93
    assert {r.task_id for r in report.rows} == {*TASKS, CANARY_TASK}
    assert {r.checkpoint for r in report.rows} == {"step-100", "step-200", "step-300"}
    assert report.reward_policies == ("default v3",)
    assert sum(report.outcomes.values()) == 93


def test_a_replayed_reward_is_counted_once_the_first_one_kept() -> None:
    messages = sample_run("run-a", START, generations=4)
    first = next(m for m in messages if m.role == "rewards")
    again = {**orjson.loads(first.value), "reward": 0.123}
    report = gather("run-a", records([*messages, Message("rewards", first.key, orjson.dumps(again))]))
    assert report.duplicates == 1
    assert 0.123 not in [r.reward for r in report.rows]


def test_the_integrity_numbers_match_the_rewards_written() -> None:
    messages = sample_run("run-a", START)
    written = rewards_of(messages)
    report = gather("run-a", records(messages))
    assert report.canary_rewards == 3
    assert report.canary_hits == 1
    assert report.outcomes["canary hit"] == 1
    assert report.hack_flags == {"exit_call": sum("exit_call" in w["flags"] for w in written)}  # type: ignore[operator]
    assert report.warn_flags["frame_introspection"] == sum("warn:frame_introspection" in w["flags"] for w in written)  # type: ignore[operator]
    assert report.invalid == {"sandbox_error": 3, "canary": 3}
    assert sum(n for n, _ in report.gap_by_task.values()) == sum(
        "public_passed_hidden_failed" in w["flags"]  # type: ignore[operator]
        for w in written
    )
    assert report.infra_errors["executor runs: sandbox_error"] == sum(
        b'"sandbox_error"' in m.value for m in messages if m.role == "executions"
    )
    assert report.infra_errors["rewards: judgement missing at deadline"] == sum(
        w["missing"] == ["judgement"] for w in written
    )
    assert report.infra_errors["rewards invalid: sandbox_error"] == 3
    assert set(report.hidden_statuses) <= {"ok", "nonzero_exit", "timeout"}


def test_latency_is_reward_time_minus_publish_time_and_slow_tasks_come_first() -> None:
    report = gather("run-a", records(sample_run("run-a", START)))
    assert all(r.latency_s is not None and 0 < r.latency_s < 20 for r in report.rows)
    assert report.slowest[0].task_id == TASKS[3]  # the sample makes it four times slower
    assert sum(b.count for b in report.latency) == len(report.rows)
    assert all(b.p50 <= b.p90 <= b.p99 for b in report.latency)


def test_a_reward_whose_generation_is_gone_still_counts_without_latency() -> None:
    messages = [m for m in sample_run("run-a", START, generations=5) if m.role == "rewards"]
    report = gather("run-a", records(messages))
    assert {r.checkpoint for r in report.rows} == {"(unknown)"}
    assert report.latency == ()
    assert report.slowest == ()


def test_a_reward_written_before_validity_claims_nothing() -> None:
    messages = sample_run("run-a", START, generations=3)
    old = []
    for m in messages:
        data = orjson.loads(m.value)
        if m.role == "rewards":
            data = {k: v for k, v in data.items() if k not in ("valid", "canary", "invalid_reason")}
            data["schema_version"] = "1.0"
        old.append(Message(m.role, m.key, orjson.dumps(data)))
    report = gather("run-a", records(old))
    assert {r.valid for r in report.rows} == {None}
    assert report.invalid == {}
    assert report.canary_rewards == 0


def test_a_run_without_rewards_is_an_error_naming_it() -> None:
    with pytest.raises(NoRewardsError, match=r"run run-z: no reward events found \(7 reward messages read\)"):
        gather("run-z", records(sample_run("run-a", START, generations=2)))


def test_names_sort_by_their_numbers() -> None:
    names = ["step-1000", "step-200", "HumanEval/10", "HumanEval/9", "b", "a"]
    assert sorted(names, key=natural_key) == ["HumanEval/9", "HumanEval/10", "a", "b", "step-200", "step-1000"]


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert percentile([0.0, 10.0], 90) == 9.0


def test_each_reward_falls_in_one_outcome_the_canary_first() -> None:
    report = gather("run-a", records(sample_run("run-a", START)))
    by_id = {r.generation_id: r for r in report.rows}
    assert outcome(by_id["run-a-g90"]) == "canary hit"
    assert outcome(by_id["run-a-g91"]) == "canary held"
    assert outcome(by_id["run-a-g11"]) == "hack gated"
    assert outcome(by_id["run-a-g7"]) == "invalid: sandbox_error"
    assert outcome(by_id["run-a-g3"]) == "signal missing"


def test_a_reward_invalid_for_a_missing_signal_is_counted_once_by_its_signal() -> None:
    messages = []
    for m in sample_run("run-a", START, generations=2):
        data = orjson.loads(m.value)
        if m.role == "rewards" and data["generation_id"] == "run-a-g1":
            data.update({"valid": False, "invalid_reason": "missing_signals", "missing": ["verdict"]})
        messages.append(Message(m.role, m.key, orjson.dumps(data)))
    report = gather("run-a", records(messages))
    assert report.infra_errors["rewards: verdict missing at deadline"] == 1
    assert "rewards invalid: missing_signals" not in report.infra_errors
    assert report.invalid["missing_signals"] == 1

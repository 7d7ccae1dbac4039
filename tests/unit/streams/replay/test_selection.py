"""Replay selection parsing: exactly one way, offsets as PARTITION:OFFSET lists, times as ISO 8601 or epoch ms."""

from __future__ import annotations

import pytest

from streams.replay.namespace import replay_prefix
from streams.replay.selection import (
    ByOffsets,
    ByRun,
    ByTime,
    SelectionError,
    build_selection,
    parse_offsets,
    parse_time,
)


def test_run_selection() -> None:
    assert build_selection(run_id="run-1") == ByRun("run-1")


def test_offsets_are_ranges_per_partition_from_inclusive_to_exclusive() -> None:
    selection = build_selection(from_offset="1:40, 0:100", to_offset="0:300,1:90")
    assert selection == ByOffsets({0: (100, 300), 1: (40, 90)})
    assert selection.describe() == "offsets 0:100..300, 1:40..90"


@pytest.mark.parametrize("text", ["0", "a:1", "0:", ":5", "0:1;1:2", "0:-1", ""])
def test_bad_offset_syntax_names_the_option(text: str) -> None:
    with pytest.raises(SelectionError, match=r"^--from-offset .*expected PARTITION:OFFSET"):
        parse_offsets(text, "--from-offset")


def test_offsets_must_name_the_same_partitions_and_go_up() -> None:
    with pytest.raises(SelectionError, match=r"names partitions \[0\] but --to-offset names \[0, 1\]"):
        build_selection(from_offset="0:1", to_offset="0:5,1:5")
    with pytest.raises(SelectionError, match="partition 0: --to-offset 5 must be above --from-offset 5"):
        build_selection(from_offset="0:5", to_offset="0:5")
    with pytest.raises(SelectionError, match="given twice"):
        parse_offsets("0:1,0:2", "--to-offset")
    with pytest.raises(SelectionError, match="go together"):
        build_selection(from_offset="0:1")


def test_times_iso_or_epoch_ms() -> None:
    assert parse_time("1700000000000", "--from-time") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20Z", "--from-time") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20", "--from-time") == 1_700_000_000_000  # naive = UTC
    assert parse_time("2023-11-14T23:13:20+01:00", "--from-time") == 1_700_000_000_000
    selection = build_selection(from_time="2023-11-14T22:13:20Z", to_time="1700000001000")
    assert selection == ByTime(1_700_000_000_000, 1_700_000_001_000)
    with pytest.raises(SelectionError, match=r"^--to-time 'yesterday': expected an ISO 8601 time"):
        parse_time("yesterday", "--to-time")
    with pytest.raises(SelectionError, match="must be after"):
        build_selection(from_time="1000", to_time="1000")
    with pytest.raises(SelectionError, match="go together"):
        build_selection(to_time="1000")


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"run_id": "r", "from_time": "1"}, {"run_id": "r", "from_offset": "0:1", "to_offset": "0:2"}],
)
def test_exactly_one_way(kwargs: dict[str, str]) -> None:
    with pytest.raises(SelectionError, match="choose exactly one of"):
        build_selection(**kwargs)


def test_replay_prefix_is_a_valid_isolated_namespace() -> None:
    assert replay_prefix("rs.", "20261129T180000-abc123") == "rs.replay.20261129T180000-abc123."
    with pytest.raises(SelectionError, match="may only contain"):
        replay_prefix("rs.", "a.b")
    with pytest.raises(SelectionError, match="too long"):
        replay_prefix("x" * 150, "y" * 50)

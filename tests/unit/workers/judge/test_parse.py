"""Score parsing: every answer shape a chat model produces maps to [0, 1], ambiguity and nonsense to None."""

from __future__ import annotations

import pytest

from workers.judge.parse import parse_score


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"score": 7, "rationale": "fine"}', 0.7),
        ('Sure! ```json\n{"score": 9}\n```', 0.9),
        ('{"score": "8/10"}', 0.8),
        ("Score: 8/10", 0.8),
        ("score = 6.5", 0.65),
        ("Rating: 3 out of 5", 0.6),
        ("I give it 3 out of 5", 0.6),
        ("70%", 0.7),
        ("7", 0.7),
        ("**10**", 1.0),
        ("score: 0.85", 0.85),
        ("First I thought Score: 2 but on reflection Score: 9", 0.9),
        ("Score: 0", 0.0),
    ],
)
def test_parses_common_answer_shapes(text: str, expected: float) -> None:
    assert parse_score(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    "text",
    ["", "   ", "great code", "Score: 11", "Score: -1", '{"score": true}', "3/5 or maybe 4/5", "150%", "Score: 12/10"],
)
def test_rejects_missing_ambiguous_or_out_of_range(text: str) -> None:
    assert parse_score(text) is None


def test_scale_is_configurable() -> None:
    assert parse_score("Score: 4", scale=5) == pytest.approx(0.8)
    assert parse_score('{"score": 1}', scale=1) == pytest.approx(1.0)

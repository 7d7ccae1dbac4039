"""The reward a verifier wrote: which file wins, clamping, and a 0 with a reason for everything else."""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.containers.reward_file import MAX_REWARD_FILE_BYTES, read_reward


@pytest.mark.parametrize(
    ("files", "reward", "source", "reason"),
    [
        ({"reward.txt": b"1\n"}, 1.0, "reward.txt", None),
        ({"reward.txt": b" 0.25 "}, 0.25, "reward.txt", None),
        ({"reward.txt": b"1e0"}, 1.0, "reward.txt", None),
        ({"reward.json": b'{"reward": 0.5, "tests": 3}'}, 0.5, "reward.json", None),
        ({"reward.json": b'{"reward": 1}', "reward.txt": b"0"}, 1.0, "reward.json", None),
        ({"reward.json": b'{"reward": 0}', "reward.txt": b"1"}, 0.0, "reward.json", None),
        ({"reward.json": b'{"accuracy": 0.75}'}, 0.75, "reward.json", None),
        ({"reward.txt": b"7"}, 1.0, "reward.txt", "clamped to 1.0"),
        ({"reward.txt": b"-3"}, 0.0, "reward.txt", "clamped to 0.0"),
        ({}, 0.0, None, "neither reward.json nor reward.txt"),
        ({"reward.txt": b""}, 0.0, "reward.txt", "is empty"),
        ({"reward.txt": b"\n"}, 0.0, "reward.txt", "is empty"),
        ({"reward.txt": b"1 passed"}, 0.0, "reward.txt", "not a number"),
        ({"reward.txt": b"true"}, 0.0, "reward.txt", "not a number"),
        ({"reward.txt": b"nan"}, 0.0, "reward.txt", "not a finite number"),
        ({"reward.txt": b"inf"}, 0.0, "reward.txt", "not a finite number"),
        ({"reward.txt": b"\xff\xfe"}, 0.0, "reward.txt", "not a number"),
        ({"reward.json": b""}, 0.0, "reward.json", "is empty"),
        ({"reward.json": b"1.0"}, 0.0, "reward.json", "not an object"),
        ({"reward.json": b"{bad"}, 0.0, "reward.json", "not JSON"),
        ({"reward.json": b'{"reward": true}'}, 0.0, "reward.json", "not a number"),
        ({"reward.json": b'{"reward": "1"}'}, 0.0, "reward.json", "not a number"),
        ({"reward.json": b'{"reward": {"x": 1}}'}, 0.0, "reward.json", "not a number"),
        ({"reward.json": b'{"a": 1, "b": 0}'}, 0.0, "reward.json", 'no "reward" key'),
        ({"reward.json": b'{"reward": 1' + b"0" * 400 + b"}"}, 0.0, "reward.json", "not JSON"),
        ({"reward.txt": b"1" + b" " * MAX_REWARD_FILE_BYTES}, 0.0, "reward.txt", "is over"),
    ],
)
def test_the_reward_and_why(files: dict[str, bytes], reward: float, source: str | None, reason: str | None) -> None:
    got = read_reward(files)
    assert (got.reward, got.source) == (reward, source)
    if reason is None:
        assert got.reason is None
    else:
        assert got.reason is not None
        assert reason in got.reason


_NUMBERS = st.floats() | st.integers(-(2**63), 2**63 - 1) | st.booleans() | st.text(max_size=3)
_JSON_FILES = st.builds(orjson.dumps, st.dictionaries(st.text(max_size=5), _NUMBERS))


@settings(max_examples=500, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["reward.json", "reward.txt", "test-stdout.txt"]), st.binary(max_size=64) | _JSON_FILES
    )
)
def test_any_files_give_a_reward_in_bounds(files: dict[str, bytes]) -> None:
    got = read_reward(files)
    assert 0.0 <= got.reward <= 1.0
    assert math.isfinite(got.reward)
    assert got.reward == 0.0 or got.source is not None

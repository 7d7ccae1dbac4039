"""Replay diff: reward changes, reason-only changes, missing sides; sorted by generation id; JSON shape."""

from __future__ import annotations

from schemas.events import RewardEvent
from streams.replay.diff import Replayed, classify, diff


def reward(
    gid: str, value: float, reasons: tuple[str, ...] = ("hidden: all 3 cases passed",), flags: tuple[str, ...] = ()
) -> RewardEvent:
    return RewardEvent(
        generation_id=gid, episode_id=gid, run_id="run-1", task_id="HumanEval/0", reward=value,
        policy_name="default", policy_version="2", reasons=list(reasons), flags=list(flags), valid=True,
    )  # fmt: skip


def test_classify() -> None:
    old = reward("g", 1.0)
    assert classify(old, reward("g", 1.0)) == "same"
    assert classify(old, reward("g", 1.0 - 1e-12)) == "same"
    assert classify(old, reward("g", 0.0)) == "changed"
    assert classify(old, reward("g", 1.0, ("other",))) == "reasons_changed"
    assert classify(old, reward("g", 1.0, flags=("exit_call",))) == "reasons_changed"
    assert classify(None, reward("g", 1.0)) == "old_missing"
    assert classify(old, None) == "new_missing"
    assert classify(None, None) == "new_missing"


def test_diff_is_sorted_counted_and_serializable() -> None:
    gens = [Replayed(g, "run-1", "HumanEval/0") for g in ("g3", "g1", "g2", "g4", "g5")]
    old = {
        "g1": reward("g1", 1.0),
        "g2": reward("g2", 1.0),
        "g3": reward("g3", 0.0, ("a", "b")),
        "g5": reward("g5", 1.0),
    }
    new = {"g1": reward("g1", 1.0), "g2": reward("g2", 0.0, ("hidden: 3 cases, fewer than 5: no proof",)),
           "g3": reward("g3", 0.0, ("b", "c")), "g4": reward("g4", 1.0)}  # fmt: skip
    report = diff(gens, old, new)
    assert [e.generation_id for e in report.entries] == ["g1", "g2", "g3", "g4", "g5"]
    assert report.counts() == {"changed": 1, "reasons_changed": 1, "old_missing": 1, "new_missing": 1, "same": 1}
    out = report.as_json()
    assert out["replayed"] == 5
    changed = out["changed"][0]
    assert changed["generation_id"] == "g2"
    assert (changed["old"]["reward"], changed["new"]["reward"], changed["delta"]) == (1.0, 0.0, -1.0)
    assert changed["reasons_removed"] == ["hidden: all 3 cases passed"]
    assert changed["reasons_added"] == ["hidden: 3 cases, fewer than 5: no proof"]
    assert changed["new"]["policy"] == "default v2"
    reasons = out["reasons_changed"][0]
    assert (reasons["reasons_removed"], reasons["reasons_added"]) == (["a"], ["c"])
    assert out["old_missing"][0]["old"] is None
    assert out["old_missing"][0]["delta"] is None
    assert out["new_missing"][0]["new"] is None
    assert [g["generation_id"] for g in out["generations"]] == ["g1", "g2", "g3", "g4", "g5"]
    assert "generations" not in report.as_json(only_differences=True)

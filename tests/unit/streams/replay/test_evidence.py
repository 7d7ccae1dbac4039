"""An image task's entry in a replay carries both verifications' evidence (the verdict each reward used, else the
latest); any other entry's JSON is exactly as before; the printed table shows the new evidence and what the old
one had differently."""

from __future__ import annotations

import io

from rich.console import Console

from rewardstream.cli.replay import _render
from schemas.events import HiddenVerdict, InputRef, RewardEvent
from schemas.result_rules import VerifierOutcome
from streams.replay.diff import Replayed, diff
from streams.replay.evidence import used_verdicts, verifier_side
from tests.unit.reward_events import verified
from tests.unit.streams.replay.test_diff import reward

OLD_IMAGE, NEW_IMAGE = "sha256:" + "0a" * 32, "sha256:" + "0b" * 32


def evidence(gid: str, event_id: str, image_id: str, value: float, tail: str) -> HiddenVerdict:
    outcome = VerifierOutcome(reward=value, source="reward.txt", seconds=1.0, image_id=image_id, output_tail=tail,
                              reward_file=f"{value:g}\n")  # fmt: skip
    return verified(gid, value).model_copy(update={"verifier": outcome, "event_id": event_id})


def used(gid: str, value: float, verdict_id: str) -> RewardEvent:
    return reward(gid, value).model_copy(update={"inputs": [InputRef(role="verdict", event_id=verdict_id)]})


def test_the_verdict_a_reward_used_is_chosen_else_the_latest() -> None:
    first, second = evidence("g", "v1", OLD_IMAGE, 1.0, "ok"), evidence("g", "v2", NEW_IMAGE, 1.0, "ok")
    assert used_verdicts({"g": [first, second]}, {"g": used("g", 1.0, "v1")})["g"] is first
    assert used_verdicts({"g": [first, second]}, {})["g"] is second


def test_an_image_tasks_entry_has_both_sides_and_a_one_shot_entry_is_unchanged() -> None:
    gens = [Replayed(g, "run-1", "hello") for g in ("image", "one-shot")]
    old_v = {"image": evidence("image", "v1", OLD_IMAGE, 1.0, "1 passed\n")}
    new_v = {"image": evidence("image", "v2", NEW_IMAGE, 0.0, "1 failed\n")}
    report = diff(gens, {g.generation_id: reward(g.generation_id, 1.0) for g in gens},
                  {g.generation_id: reward(g.generation_id, 1.0) for g in gens}, old_v, new_v)  # fmt: skip
    image, one_shot = (e.as_json() for e in report.entries)
    assert "verifier" not in one_shot
    assert image["verifier"] == {"old": verifier_side(old_v["image"]), "new": verifier_side(new_v["image"])}
    new = image["verifier"]["new"]
    assert (new["event_id"], new["status"]) == ("v2", "ok")
    assert (new["verifier"]["image_id"], new["verifier"]["output_tail"], new["verifier"]["reward_file"]) == (
        NEW_IMAGE, "1 failed\n", "0\n")  # fmt: skip

    out = io.StringIO()
    _render(report, False, Console(file=out, width=200, soft_wrap=True, color_system=None, force_terminal=False))
    rows = [" ".join(line.split()) for line in out.getvalue().splitlines()]
    assert "image task verifier of image" in rows
    assert "image task verifier of one-shot" not in rows
    block = rows[rows.index("image task verifier of image") :]
    for row in (f"task image {NEW_IMAGE}", f"was {OLD_IMAGE}", "reward file reward.txt: '0\\n'",
                "was reward.txt: '1\\n'", "test.sh output (tail) 1 failed", "was 1 passed"):  # fmt: skip
        assert row in block, block

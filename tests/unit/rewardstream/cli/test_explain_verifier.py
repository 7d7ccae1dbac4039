"""An image task's verifier in explain (pure): its reward, the task image the verification ran on, the reward
file as written and the last lines of test.sh's output, bounded; a test suite's verdict prints no such rows,
and odd values never crash the formatter."""

from __future__ import annotations

import io
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from rewardstream.cli.explain import _render
from rewardstream.cli.explain_episode import episode_lines
from rewardstream.cli.explain_verifier import OUTPUT_LINES, output_tail_lines, verifier_rows
from tests.unit.explain_stories import one_shot_story

IMAGE_ID = "sha256:" + "5e" * 32
VERIFIER = {"reward": 1.0, "source": "reward.txt", "reason": None, "timed_out": False, "seconds": 2.5,
            "image_id": IMAGE_ID, "output_tail": "collected 1 item\n\ntest_hello.py .\n1 passed in 0.01s\n",
            "reward_file": "1\n"}  # fmt: skip


def rendered(story: dict[str, Any]) -> str:
    out = io.StringIO()
    _render(story, Console(file=out, width=200, soft_wrap=True, color_system=None, force_terminal=False))
    return out.getvalue()


def test_an_image_tasks_verdict_shows_its_evidence() -> None:
    rows = verifier_rows(VERIFIER)
    assert rows == {
        "verifier reward": "1.0 from reward.txt",
        "task image": IMAGE_ID,
        "reward file": "reward.txt: '1\\n'",
        "test.sh output (tail)": "collected 1 item\n\ntest_hello.py .\n1 passed in 0.01s",
    }


def test_a_zero_says_why_and_what_was_not_there() -> None:
    rows = verifier_rows({"reward": 0.0, "source": None, "reason": "the verifier wrote neither", "timed_out": True,
                          "seconds": 1.0, "output_tail": ""})  # fmt: skip
    assert rows["verifier reward"] == "0.0 (test.sh ran past its timeout)"
    assert rows["verifier reason"] == "the verifier wrote neither"
    assert (rows["task image"], rows["reward file"]) == ("(not recorded)", "(none written)")
    assert rows["test.sh output (tail)"] == "(test.sh printed nothing)"
    # a verdict from before the evidence was recorded: a file gave the reward, its content was not kept
    older = verifier_rows({"reward": 0.5, "source": "reward.txt", "seconds": 1.0})
    assert (older["reward file"], older["test.sh output (tail)"]) == ("(not recorded)", "(not recorded)")


def test_only_the_last_lines_of_a_long_output_are_printed_saying_how_many_came_before() -> None:
    tail = "".join(f"line {n}\x1b[31m\n" for n in range(100))
    shown = output_tail_lines(tail).splitlines()
    assert shown[0] == f"... ({100 - OUTPUT_LINES} earlier lines kept, see --json)"
    assert shown[1:] == [f"line {n}\ufffd[31m" for n in range(100 - OUTPUT_LINES, 100)]


def test_explain_prints_the_rows_in_the_verdicts_section_and_a_suites_verdict_prints_none() -> None:
    story = one_shot_story()
    assert "task image" not in rendered(story)
    story["verdict"] = {**story["verdict"], "suite_kind": "verifier", "verifier": VERIFIER}
    out = rendered(story)
    section = out[out.index("hidden verdict (an image task's verifier: test.sh)") : out.index("judge")]
    rows = [" ".join(line.split()) for line in section.splitlines()]
    for row in ("verifier reward 1.0 from reward.txt", f"task image {IMAGE_ID}", "reward file reward.txt: '1\\n'",
                "test.sh output (tail) collected 1 item", "1 passed in 0.01s"):  # fmt: skip
        assert row in rows, section


@given(st.dictionaries(st.sampled_from(["reward", "source", "reason", "timed_out", "image_id", "output_tail",
                                        "reward_file"]), st.none() | st.booleans() | st.floats() | st.text()),
       )  # fmt: skip
def test_arbitrary_values_never_crash_the_formatter(verifier: dict[str, Any]) -> None:
    rows = verifier_rows(verifier)
    assert set(rows) >= {"verifier reward", "task image", "reward file", "test.sh output (tail)"}
    assert verifier_rows(["not", "a", "mapping"]) == {}


def test_an_episode_names_the_images_its_steps_ran_on_and_a_workspace_episode_none() -> None:
    other = "sha256:" + "77" * 32
    steps = [{"turn": 0, "action": "open", "status": "ok", "image_id": None},
             {"turn": 1, "action": "exec", "status": "ok", "image_id": IMAGE_ID},
             {"turn": 2, "action": "exec", "status": "ok", "image_id": IMAGE_ID}]  # fmt: skip
    episode = {"episode_id": "ep", "task_id": "hello", "turns": 2, "steps": steps}
    assert f"task image of the steps: {IMAGE_ID}" in episode_lines(episode)
    rebuilt = {**episode, "steps": [*steps, {"turn": 3, "action": "exec", "status": "ok", "image_id": other}]}
    assert f"task images of the steps: {IMAGE_ID}, {other}" in episode_lines(rebuilt)
    workspace = {**episode, "steps": [{**s, "image_id": None} for s in steps]}
    assert not [line for line in episode_lines(workspace) if "task image" in line]

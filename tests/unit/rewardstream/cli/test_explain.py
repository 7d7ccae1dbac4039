"""Explain of an agent episode (pure): its steps in topic order with the actions they answer, bounded output,
notes for what is missing or undecodable, and a one-shot generation printed exactly as before."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from rewardstream.cli.explain import _render
from rewardstream.cli.explain_episode import OUTPUT_LINES, STEPS_SHOWN, episode_lines
from schemas.episodes import ActionEvent, ObservationEvent
from schemas.status import SandboxStatus
from streams.explain.steps import OUTPUT_HEAD_CHARS, EpisodeRecords, SnapshotSize, episode_section
from streams.explain.story import build_story
from streams.reward.policy import default_policy_path
from tests.unit.explain_stories import episode_generation, located, obs_record, one_shot_story

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "explain_one_shot.txt"
SIZE = SnapshotSize(size_bytes=10240)


def rendered(story: dict[str, Any]) -> str:
    out = io.StringIO()
    _render(story, Console(file=out, width=120, soft_wrap=True, color_system=None, force_terminal=False))
    return out.getvalue()


def act(turn: int, body: dict[str, Any]) -> ActionEvent:
    return ActionEvent.model_validate({"episode_id": "ep", "turn": turn, "action": body})


def played() -> EpisodeRecords:
    """open, read, a failing exec, write, a passing exec, submit; plus a duplicate action and a bad record."""
    actions = [
        act(0, {"action": "open", "task_id": "swe/calc", "run_id": "run-1", "policy_version": "p-7"}),
        act(1, {"action": "read", "path": "calc/ops.py"}),
        act(2, {"action": "exec", "command": ["python", "-m", "pytest", "-q"], "timeout_s": 10}),
        act(2, {"action": "exec", "command": ["python", "-m", "pytest", "-q"], "timeout_s": 10}),  # resent
        act(3, {"action": "write", "path": "calc/ops.py", "text": "def add(a, b):\n    return a + b\n"}),
        act(4, {"action": "exec", "command": "python -m pytest -q"}),
        act(5, {"action": "submit"}),
    ]
    observations = [
        ObservationEvent.build(episode_id="ep", turn=0, action="open", status=SandboxStatus.OK),
        ObservationEvent.build(episode_id="ep", turn=1, action="read", status=SandboxStatus.OK,
                               content="def add(a, b): ..."),
        ObservationEvent.build(episode_id="ep", turn=2, action="exec", status=SandboxStatus.NONZERO_EXIT, exit_code=1,
                               stdout="F\n" + "=" * 70 + "\nline3\nline4\n" + "x" * 2000, wall_ms=812.4),
        ObservationEvent.build(episode_id="ep", turn=3, action="write", status=SandboxStatus.OK, wall_ms=3.0),
        ObservationEvent.build(episode_id="ep", turn=4, action="exec", status=SandboxStatus.OK, exit_code=0,
                               stdout="1 passed\n"),
        ObservationEvent.build(episode_id="ep", turn=5, action="submit", status=SandboxStatus.OK, ended="submitted"),
        ObservationEvent.build(episode_id="ep", turn=6, action="exec", status="rejected", reason="the episode ended"),
    ]  # fmt: skip
    records = EpisodeRecords("ep", skipped={"rs.observations": 1})
    for i, (sent_event, answer) in enumerate(zip(actions, [*observations[:3], None, *observations[3:]], strict=False)):
        records.keep(obs_record(2 * i, "rs.actions"), sent_event)
        if answer is not None:  # the resent exec (its duplicate) has no answer
            records.keep(obs_record(2 * i + 1), answer)
    records.keep(obs_record(99), observations[-1])
    records.keep(
        obs_record(100), ObservationEvent.build(episode_id="other", turn=1, action="read", status=SandboxStatus.OK)
    )
    return records


def test_a_one_shot_generation_prints_exactly_as_before() -> None:
    story = one_shot_story()
    assert "episode" not in story
    assert rendered(story) == GOLDEN.read_text()


def test_a_reward_that_is_no_training_data_says_so_and_why() -> None:
    story = one_shot_story()
    assert "training data" not in rendered(story)  # valid: printed as before
    story["reward"] |= {"valid": False, "canary": True, "invalid_reason": "canary", "reward": 1.0}
    assert "training data  no (canary: a detected hack)" in rendered(story)
    story["reward"] |= {"canary": False, "invalid_reason": "sandbox_error", "reward": 0.0}
    assert "no (sandbox_error)" in rendered(story)


def test_a_run_the_host_kept_waiting_or_repeated_says_so_and_an_unhindered_one_does_not() -> None:
    story = one_shot_story()
    story["execution"]["sandbox"] |= {"wait_ms": 31_400.0, "host_retries": 0}
    story["verdict"]["sandbox"] |= {"wait_ms": 1_200.0, "host_retries": 2}
    lines = [line.strip() for line in rendered(story).splitlines() if line.strip().startswith("host")]
    assert lines == [
        "host      waited 31.4 s for a CPU (not counted)",
        "host          waited 1.2 s for a CPU (not counted); repeated 2x: the host starved it",
    ]
    story["execution"]["sandbox"] |= {"wait_ms": 12.0}
    story["verdict"]["sandbox"] |= {"wait_ms": 0.0, "host_retries": 0}
    assert "for a CPU" not in rendered(story)


def test_the_episode_section_lists_each_step_with_the_action_it_answers() -> None:
    section = episode_section(episode_generation(), played(), SIZE)
    assert (section["episode_id"], section["task_id"], section["run_id"], section["ended"]) == (
        "ep", "swe/calc", "run-1", "submitted")  # fmt: skip
    assert section["workspace"] == {"url": "s3://bucket/sha256/ab/" + "ab" * 32, "sha256": "ab" * 32,
                                    "size_bytes": 10240, "size_error": None}  # fmt: skip
    steps = section["steps"]
    assert [(s["turn"], s["action"], s["status"]) for s in steps] == [
        (0, "open", "ok"),
        (1, "read", "ok"),
        (2, "exec", "nonzero_exit"),
        (3, "write", "ok"),
        (4, "exec", "ok"),
        (5, "submit", "ok"),
    ]  # fmt: skip  (the rejection after the end is not a step)
    assert steps[1]["detail"] == {"path": "calc/ops.py"}
    assert steps[1]["content_chars"] == len("def add(a, b): ...")
    assert "content" not in steps[1]  # a read's text is counted, never copied
    assert steps[2]["detail"] == {"command": ["python", "-m", "pytest", "-q"], "timeout_s": 10}
    assert (steps[2]["exit_code"], steps[2]["wall_ms"]) == (1, 812.4)
    assert len(steps[2]["stdout_head"]) == OUTPUT_HEAD_CHARS < steps[2]["stdout_chars"]
    assert steps[3]["detail"] == {"path": "calc/ops.py", "bytes": 32}
    assert steps[5]["detail"] == {}
    assert section["notes"] == ["1 undecodable record(s) of the episode on rs.observations skipped"]


def test_the_printed_episode_shows_the_steps_in_order_and_the_heads_of_their_output() -> None:
    gen = episode_generation()
    story = build_story(located(gen), [], [default_policy_path()], episode=episode_section(gen, played(), SIZE))
    text = rendered(story)
    assert "None chars inline" not in text
    assert "code            none: an agent episode's final workspace (below)" in text
    order = [
        "turn 0: open swe/calc -> ok",
        "turn 1: read calc/ops.py -> ok, 0 ms, read 18 chars",
        "turn 2: exec python -m pytest -q -> nonzero_exit, exit 1, 812 ms",
        "turn 3: write calc/ops.py (32 bytes)",
        "turn 4: exec python -m pytest -q -> ok, exit 0",
        "turn 5: submit -> ok, 0 ms, ended: submitted",
    ]
    where = [text.index(part) for part in order]
    assert where == sorted(where), text
    assert "ended: submit, after 5 turn(s)" in text
    assert "(10240 bytes; sha256 " + "ab" * 32 in text
    assert "stdout: ... (2085 chars in all)" in text
    assert "line4" not in text  # OUTPUT_LINES of each output, not all of it
    assert "note: 1 undecodable record(s)" in text
    assert text.index("agent episode") < text.index("public tests (executor)") < text.index("reward math")
    assert story["artifacts"]["generation.workspace"] == gen.workspace_ref


def test_a_thousand_turns_print_a_bounded_number_of_lines_and_say_how_many_were_left_out() -> None:
    observations = [
        (obs_record(t), ObservationEvent.build(episode_id="ep", turn=t, action="exec", status=SandboxStatus.OK,
                                               exit_code=0, stdout="out\n" * 100, stderr="err\n" * 100))
        for t in range(1, 1001)
    ]  # fmt: skip
    records = EpisodeRecords("ep")
    for record, observation in observations:
        records.keep(record, observation)
    section = episode_section(episode_generation(1000), records, SIZE)
    lines = episode_lines(section)
    assert len(section["steps"]) == 1000
    assert f"  ... {1000 - STEPS_SHOWN} steps left out (explain --json has them all)" in lines
    assert len(lines) < 10 + STEPS_SHOWN * (3 + 2 * (OUTPUT_LINES + 1))
    assert "turn 1:" in lines[4]
    assert any(line.startswith("  turn 1000:") for line in lines)
    assert "note: turn(s) 0 not found in the scanned range (see scanned; try --scan-limit)" in lines
    assert "note: no observation that ended the episode found" in lines


def test_an_episode_with_no_records_found_says_so() -> None:
    section = episode_section(episode_generation(), EpisodeRecords("ep"), SnapshotSize(error="S3 down"))
    assert (section["steps"], section["ended"]) == ([], None)
    lines = episode_lines(section)
    assert "ended: unknown (no ending observation found), after 5 turn(s)" in lines
    assert any("size unknown: S3 down" in line for line in lines)
    assert any(line.startswith("note: no observation of the episode found") for line in lines)


TEXT = st.text(max_size=300)
OBSERVATIONS = st.builds(
    lambda turn, action, status, exit_code, out, err, content, wall, reason, ended: (
        turn, action, status, exit_code, out, err, content, wall, reason, ended),
    st.integers(0, 10_000), st.sampled_from(["exec", "write", "read", "submit", "open", "fork", None]),
    st.sampled_from(["ok", "nonzero_exit", "timeout", "memory_limit", "output_limit", "killed", "crashed", "rejected"]),
    st.none() | st.integers(-(2**31), 2**31), TEXT | st.binary(max_size=300), TEXT, st.none() | TEXT,
    st.floats(min_value=-1e9, max_value=1e12, allow_nan=False), st.none() | TEXT,
    st.sampled_from(["submitted", "max_turns", "episode_timeout", "abandoned", None]),
)  # fmt: skip


def _observation(fields: tuple[Any, ...]) -> ObservationEvent | None:
    turn, action, status, exit_code, out, err, content, wall, reason, ended = fields
    try:
        return ObservationEvent.build(
            episode_id="ep", turn=turn, action=action, status=status, stdout=out, stderr=err, wall_ms=wall,
            exit_code=exit_code if action == "exec" else None, content=content if action == "read" else None,
            reason=reason or ("r" if status == "rejected" else None), ended=ended,
        )  # fmt: skip
    except ValueError:  # a combination the contract refuses (e.g. ended=submitted on an exec): not an observation
        return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OBSERVATIONS, max_size=60))
def test_arbitrary_observations_never_crash_the_formatter(fields: list[tuple[Any, ...]]) -> None:
    observations = [o for o in map(_observation, fields) if o is not None]
    records = EpisodeRecords("ep")
    for i, observation in enumerate(observations):
        records.keep(obs_record(i), observation)
    section = episode_section(episode_generation(), records, SIZE)
    lines = episode_lines(section)
    assert len(lines) < 10 + STEPS_SHOWN * (3 + 2 * (OUTPUT_LINES + 1))
    assert all("\n" not in line for line in lines)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
STEP_KEYS = st.sampled_from([
    "turn", "action", "detail", "status", "exit_code", "wall_ms", "stdout_head", "stdout_chars", "stdout_truncated",
    "stderr_head", "content_chars", "reason", "ended",
])  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["episode_id", "ended", "turns", "workspace", "forked_from", "notes"]), JSON)
       | JSON, st.lists(st.dictionaries(STEP_KEYS, JSON) | JSON, max_size=50))  # fmt: skip
def test_arbitrary_section_values_never_crash_the_formatter(episode: Any, steps: list[Any]) -> None:
    lines = episode_lines({**episode, "steps": steps} if isinstance(episode, dict) else episode)
    assert all(isinstance(line, str) for line in lines)


def test_the_story_of_an_episode_has_a_record_location_per_step() -> None:
    section = episode_section(episode_generation(), played(), SIZE)
    assert [s["location"]["offset"] for s in section["steps"]] == [1, 3, 5, 9, 11, 13]
    assert section["steps"][0]["location"] == {"topic": "rs.observations", "partition": 1, "offset": 1,
                                               "timestamp_ms": 1_700_000_000_010}  # fmt: skip

"""``rewardstream explain`` of an agent episode, as a whole process against the real Kafka, S3 and pipeline
(the episode SDK test's stack: the episode worker, executor, verifier, judge and reward processor): a short
episode is played and submitted, and explain lists its steps in order with their statuses, the snapshot in
S3 with its size, and then the grading; a bad record on the observations topic is skipped with a note; a
one-shot generation's story has no episode in it, as before."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.clients import make_producer
from schemas.codec import encode
from schemas.events import GenerationEvent
from tests.integration.helpers import cli, cli_json
from tests.integration.test_episode_sdk import (  # the episode SDK test's stack fixture and its helpers
    PUBLIC_TESTS,
    TASK_ID,
    Stack,
    _no_hidden_data,
    _play,
    _transcript,
    stack,  # noqa: F401 - a fixture: pytest finds it in this module's namespace
)
from tests.sandbox.swe_task import HIDDEN_VALUES, OPS_FIXED

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

SECTIONS = {"generation_id", "found", "generation", "execution", "verdict", "judgement", "reward", "math",
            "artifacts", "logs", "log_search_error", "scanned"}  # fmt: skip


def _explain_json(gid: str, env: dict[str, str]) -> dict[str, Any]:
    story: dict[str, Any] = cli_json(["explain", gid, "--json"], env)
    return story


def _episode_story(gid: str, env: dict[str, str], timeout_s: float = 120) -> dict[str, Any]:
    """explain --json until its grading is complete (every result event committed), within a deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        story = _explain_json(gid, env)
        if all(story[s] is not None for s in ("execution", "verdict", "judgement", "reward")):
            return story
        assert time.monotonic() < deadline, story
        time.sleep(0.5)  # poll interval of the condition above, not a wait for it


def test_explain_lists_an_episodes_steps_in_order_and_a_one_shot_story_is_unchanged(
    stack: Stack,  # noqa: F811 - the imported fixture
    kafka_config: dict[str, str],
    tmp_path: Path,
) -> None:
    played = _transcript(tmp_path / "fix.jsonl", [
        {"action": "read", "path": "calc/ops.py"},
        {"action": "exec", "command": PUBLIC_TESTS, "timeout_s": 10},
        {"action": "write", "path": "calc/ops.py", "text": OPS_FIXED},
        {"action": "exec", "command": PUBLIC_TESTS},
        {"action": "submit"},
    ])  # fmt: skip
    done = _play(stack, played, "--run-id", "explain-run")
    assert done.returncode == 0, (done.stderr.decode(errors="replace"), stack.worker_logs())
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    episode_id, reward = lines[0]["episode_id"], lines[-1]
    assert reward["reward"] == 1.0, reward

    story = _episode_story(episode_id, stack.env)
    assert set(story) == {*SECTIONS, "episode"}
    episode = story["episode"]
    assert (episode["episode_id"], episode["task_id"], episode["run_id"]) == (episode_id, TASK_ID, "explain-run")
    assert (episode["ended"], episode["turns"], episode["notes"]) == ("submitted", 5, [])
    steps = episode["steps"]
    assert [(s["turn"], s["action"], s["status"]) for s in steps] == [
        (0, "open", "ok"), (1, "read", "ok"), (2, "exec", "nonzero_exit"), (3, "write", "ok"), (4, "exec", "ok"),
        (5, "submit", "ok")]  # fmt: skip
    assert steps[2]["detail"] == {"command": PUBLIC_TESTS, "timeout_s": 10}
    assert steps[3]["detail"] == {"path": "calc/ops.py", "bytes": len(OPS_FIXED.encode())}
    assert (steps[2]["exit_code"], steps[4]["exit_code"]) == (1, 0)
    assert all(s["location"]["partition"] == story["generation"]["location"]["partition"] for s in steps)
    workspace = episode["workspace"]
    assert workspace["url"].startswith("s3://")
    assert workspace["size_error"] is None
    assert workspace["size_bytes"] > 0
    assert story["artifacts"]["generation.workspace"] == workspace["url"]
    assert story["reward"]["reward"] == 1.0
    scanned = {s["topic"].removeprefix(stack.settings.topic_prefix) for s in story["scanned"]}
    assert scanned >= {"generations", "rewards", "actions", "observations"}

    # A record on the observations topic with the episode's key that does not decode: a note, not a crash.
    producer = make_producer(kafka_config)
    producer.produce(f"{stack.settings.topic_prefix}observations", key=episode_id.encode(), value=b"{not json",
                     timestamp=story["generation"]["location"]["timestamp_ms"])  # fmt: skip
    assert producer.flush(30) == 0
    text = cli(["explain", episode_id], stack.env)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    order = [
        "agent episode",
        f"episode {episode_id}: task {TASK_ID}, run explain-run",
        "ended: submit, after 5 turn(s)",
        f"workspace snapshot: {workspace['url']} ({workspace['size_bytes']} bytes",
        "turn 0: open swe/calc-call -> ok",
        "turn 1: read calc/ops.py -> ok",
        f"turn 2: exec {PUBLIC_TESTS} -> nonzero_exit, exit 1",
        f"turn 3: write calc/ops.py ({len(OPS_FIXED.encode())} bytes) -> ok",
        f"turn 4: exec {PUBLIC_TESTS} -> ok, exit 0",
        "turn 5: submit -> ok",
        "note: 1 undecodable record(s) of the episode on",
        "public tests (executor)",
        "hidden verdict (verifier; counts only)",
        "reward math",
    ]
    where = [out.find(part) for part in order]
    assert -1 not in where, [p for p, w in zip(order, where, strict=True) if w < 0]
    assert where == sorted(where), out
    assert "None chars inline" not in out
    _no_hidden_data(orjson.dumps(episode).decode() + out[: out.index("public tests (executor)")])
    # the grading shows hidden cases as ids and statuses only (as for any generation), never their data
    assert not [v for v in HIDDEN_VALUES if v in out + orjson.dumps(story).decode()]

    # A one-shot generation (code, not an episode): its story has no episode section, printed as before.
    one_shot = GenerationEvent(generation_id=f"{episode_id}-code", episode_id=f"{episode_id}-code",
                               run_id="explain-run", task_id=TASK_ID, policy_version="p-7", code="x = 1\n")  # fmt: skip
    producer.produce(f"{stack.settings.topic_prefix}generations", key=one_shot.key(), value=encode(one_shot))
    assert producer.flush(30) == 0
    plain = _explain_json(one_shot.generation_id, stack.env)
    assert set(plain) == SECTIONS
    assert plain["generation"]["code"] == "x = 1\n"
    assert "generation.workspace" not in plain["artifacts"]
    shown = cli(["explain", one_shot.generation_id], stack.env)
    assert shown.returncode == 0, shown.stderr
    assert "6 chars inline" in shown.stdout
    assert "agent episode" not in shown.stdout
    assert {s["topic"].removeprefix(stack.settings.topic_prefix) for s in plain["scanned"]} == {
        "generations", "executions", "verdicts", "judgements", "rewards"}  # fmt: skip

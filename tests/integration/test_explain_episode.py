"""``rewardstream explain`` of an agent episode, as a whole process against the real Kafka, S3 and pipeline
(the episode SDK test's stack: the episode worker, executor, verifier, judge and reward processor): a short
episode is played and submitted, and explain lists its steps in order with their statuses, the snapshot in
S3 with its size, and then the grading; a bad record on the observations topic is skipped with a note; a
one-shot generation's story has no episode in it, as before. A log indexer runs too, so the episode worker's
log lines (one per action) are found with the generation's."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.clients import make_producer
from schemas.codec import encode
from schemas.events import GenerationEvent
from tests.integration.episode_env import Stack
from tests.integration.helpers import cli, cli_json
from tests.integration.test_episode_sdk import (  # the episode SDK test's stack fixture and its helpers
    FIX_ACTIONS,
    PUBLIC_TESTS,
    TASK_ID,
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


def _graded_and_logged(story: dict[str, Any]) -> bool:
    """Every result event committed, and the log lines of each role and of every turn indexed."""
    components = {line["component"] for line in story["logs"]}
    turns = {line["message"].split(":")[0] for line in story["logs"] if line["component"] == "episode"}
    return all(story[s] is not None for s in ("execution", "verdict", "judgement", "reward")) and (
        components >= {"episode", "executor", "verifier", "judge"} and len(turns) == 6
    )


def _story_when(gid: str, env: dict[str, str], ready: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """explain --json until ``ready`` holds of its story, within a deadline."""
    deadline = time.monotonic() + 120
    while True:
        story = _explain_json(gid, env)
        if ready(story):
            return story
        assert time.monotonic() < deadline, story
        time.sleep(0.5)  # poll interval of the condition above, not a wait for it


@contextmanager
def indexer(env: dict[str, str], log: Path) -> Iterator[None]:
    """The log indexer as a process of its own (the stack has none), stopped after."""
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rewardstream", "worker", "indexer"], env=env, stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip
    try:
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def test_explain_lists_an_episodes_steps_in_order_and_a_one_shot_story_is_unchanged(
    stack: Stack,  # noqa: F811 - the imported fixture
    kafka_config: dict[str, str],
    logs_index_prefix: str,
    tmp_path: Path,
) -> None:
    env = {**stack.env, "RS_OPENSEARCH_INDEX_PREFIX": logs_index_prefix, "RS_OPENSEARCH_REPLICAS": "0"}
    with indexer(env, tmp_path / "indexer.log"):
        _explain_an_episode_then_a_one_shot(stack, env, kafka_config, tmp_path)


def _explain_an_episode_then_a_one_shot(
    pipeline: Stack, env: dict[str, str], kafka_config: dict[str, str], tmp_path: Path
) -> None:
    played = _transcript(tmp_path / "fix.jsonl", FIX_ACTIONS)
    done = _play(pipeline, played, "--run-id", "explain-run")
    assert done.returncode == 0, (done.stderr.decode(errors="replace"), pipeline.worker_logs())
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    episode_id, reward = lines[0]["episode_id"], lines[-1]
    assert reward["reward"] == 1.0, reward

    story = _story_when(episode_id, env, _graded_and_logged)
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
    # the episode worker's line of each turn (they name the episode, not the generation), then the grading's
    episode_lines = [line["message"] for line in story["logs"] if line["component"] == "episode"]
    assert [m.split(":")[0] for m in episode_lines] == [
        "open turn 0", "read turn 1", "exec turn 2", "write turn 3", "exec turn 4", "submit turn 5"]  # fmt: skip
    scanned = {s["topic"].removeprefix(pipeline.settings.kafka.topic_prefix) for s in story["scanned"]}
    assert scanned >= {"generations", "rewards", "actions", "observations"}

    # A record on the observations topic with the episode's key that does not decode: a note, not a crash.
    producer = make_producer(kafka_config)
    producer.produce(f"{pipeline.settings.kafka.topic_prefix}observations", key=episode_id.encode(), value=b"{not json",
                     timestamp=story["generation"]["location"]["timestamp_ms"])  # fmt: skip
    assert producer.flush(30) == 0
    text = cli(["explain", episode_id], env)
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
        "log lines",
        "submit turn 5: ok",
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
    producer.produce(f"{pipeline.settings.kafka.topic_prefix}generations", key=one_shot.key(), value=encode(one_shot))
    assert producer.flush(30) == 0
    plain = _explain_json(one_shot.generation_id, env)
    assert set(plain) == SECTIONS
    assert plain["generation"]["code"] == "x = 1\n"
    assert "generation.workspace" not in plain["artifacts"]
    shown = cli(["explain", one_shot.generation_id], env)
    assert shown.returncode == 0, shown.stderr
    assert "6 chars inline" in shown.stdout
    assert "agent episode" not in shown.stdout
    assert {s["topic"].removeprefix(pipeline.settings.kafka.topic_prefix) for s in plain["scanned"]} == {
        "generations", "executions", "verdicts", "judgements", "rewards"}  # fmt: skip

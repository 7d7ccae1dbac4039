"""The episode worker's handler on its own: actions in, outputs and table rows out, with a dict for S3, a task
registry in a temporary directory, and each step's sandbox run replaced by a scripted outcome (the real runs
are tests/sandbox/test_episode_step_*.py's and the integration tests')."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from schemas.codec import decode
from schemas.episodes import ActionEvent, ObservationEvent
from schemas.events import GenerationEvent
from schemas.status import SandboxStatus
from schemas.tasks import Task
from tests.sandbox.swe_task import task
from tests.unit.workers.episodes.test_workspaces import DictStore
from workers.artifacts import ArtifactError
from workers.episodes.sources import CommittedEpisodes
from workers.episodes.step import StepAction, StepOutcome
from workers.episodes.table import EpisodeTable
from workers.episodes.transcript import steps_of
from workers.episodes.workspaces import Workspaces
from workers.handler import Done, InfrastructureError, Output, Source
from workers.roles import episodes as episodes_role
from workers.roles.common import TaskSource
from workers.roles.episodes import EpisodeHandler, EpisodeTopics
from workers.tasks.registry import TaskRegistry

TASK_ID = "swe/calc-call"
TOPICS = EpisodeTopics(observations="obs", generations="gen", changelog="changelog")
T0_MS = 1_700_000_000_000


def long_task() -> Task:
    """The SWE task with the reviewer's limits: 600 s steps, 300 s of idle, an hour in all."""
    limits = {"max_turns": 30, "step_timeout_s": 600, "episode_timeout_s": 3600, "idle_timeout_s": 300}
    return Task.model_validate({**task("call", TASK_ID).model_dump(mode="json", by_alias=True), "episode": limits})


#: What a scripted step does: the outcome for (the workspace before, the action).
Script = Callable[[bytes, StepAction], StepOutcome]


def unchanged(before: bytes, action: StepAction) -> StepOutcome:
    """A step that leaves the workspace as it was (exit 0)."""
    exit_code = 0 if action.kind == "exec" else None
    return StepOutcome(SandboxStatus.OK, before, hashlib.sha256(before).hexdigest(), exit_code=exit_code)


class Harness:
    """One handler on partition 0 (epoch 1), its outputs kept, the changelog rows a fork's lookup reads."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: Script = unchanged) -> None:
        registry = TaskRegistry(tmp_path / "registry")
        registry.store([long_task()])
        self.store = DictStore()
        self.table = EpisodeTable(lambda _partition: {})
        self.table.assigned("actions", 0, 1)
        self.rows: dict[str, bytes] = {}
        self.offset = 0
        self.now_ms = T0_MS
        self.steps: list[StepAction] = []

        def catch_up(_partition: int, rows: dict[str, bytes], _start: int) -> int:
            rows.update(self.rows)
            return 0

        def run_step(_sandbox: Any, before: bytes, action: StepAction, *_args: Any) -> StepOutcome:
            self.steps.append(action)
            return script(before, action)

        monkeypatch.setattr(episodes_role, "run_step", run_step)
        self.handler = EpisodeHandler(
            TOPICS, TaskSource(registry), sandbox=None, workspaces=Workspaces(self.store),  # type: ignore[arg-type]
            table=self.table, committed=CommittedEpisodes(1, catch_up), store=self.store,  # type: ignore[arg-type]
            clock=lambda: self.now_ms,
        )  # fmt: skip

    def act(self, episode: str, turn: int, body: dict[str, Any], *, at_ms: int | None = None) -> Done:
        """Handle one action appended at ``at_ms`` (default: now); its outputs' changelog rows are committed."""
        event = ActionEvent.model_validate({"episode_id": episode, "turn": turn, "action": body})
        self.offset += 1
        source = Source("actions", 0, self.offset, at_ms if at_ms is not None else self.now_ms, 1)
        done = self.handler.handle(event, source)
        assert isinstance(done, Done), done
        self.commit(done.outputs)
        return done

    def commit(self, outputs: tuple[Output, ...] | list[Output]) -> None:
        for out in outputs:
            if out.topic == TOPICS.changelog and out.key is not None and out.value is not None:
                self.rows[out.key.decode()] = out.value

    def expire(self, busy: frozenset[bytes] = frozenset()) -> list[Output]:
        outputs = self.handler.expire("actions", 0, 1, self.now_ms, busy)
        self.commit(outputs)
        return outputs


def observations(outputs: tuple[Output, ...] | list[Output]) -> list[ObservationEvent]:
    return [decode(o.value or b"", ObservationEvent) for o in outputs if o.topic == TOPICS.observations]


def generations(outputs: tuple[Output, ...] | list[Output]) -> list[GenerationEvent]:
    return [decode(o.value or b"", GenerationEvent) for o in outputs if o.topic == TOPICS.generations]


def open_body(run_id: str = "run-a", policy_version: str = "p-a") -> dict[str, Any]:
    return {"action": "open", "task_id": TASK_ID, "run_id": run_id, "policy_version": policy_version}


# ---- forks ---------------------------------------------------------------------------------------------------


def test_a_fork_belongs_to_the_run_that_forked_it_and_inherits_the_sources_when_it_names_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run B forking run A's episode gets the fork's reward: its generation carries B's run and policy."""
    box = Harness(tmp_path, monkeypatch)
    box.act("a", 0, open_body())
    box.act("a", 1, {"action": "exec", "command": "true"})
    fork = {"action": "fork", "from_episode": "a", "turn": 1}
    assert observations(box.act("b", 0, {**fork, "run_id": "run-b", "policy_version": "p-b"}).outputs)[0].status == "ok"
    (gen,) = generations(box.act("b", 1, {"action": "submit"}).outputs)
    assert (gen.generation_id, gen.run_id, gen.policy_version) == ("b", "run-b", "p-b")
    box.act("c", 0, fork)  # an older trainer's fork names no run: it is the source's, as before
    (inherited,) = generations(box.act("c", 1, {"action": "submit"}).outputs)
    assert (inherited.run_id, inherited.policy_version) == ("run-a", "p-a")


# ---- infrastructure failures ----------------------------------------------------------------------------------


def test_a_sandbox_error_or_an_s3_outage_is_the_infrastructures_and_the_step_reruns_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the loop retries for as long as the worker runs (``InfrastructureError``): the agent sees nothing,
    the episode's state is untouched, and the same action succeeds once the infrastructure is back."""
    failing = {"sandbox": True}

    def script(before: bytes, action: StepAction) -> StepOutcome:
        if failing["sandbox"]:
            return StepOutcome(SandboxStatus.SANDBOX_ERROR, before, hashlib.sha256(before).hexdigest(),
                               reason="sandbox error: the fork server is gone")  # fmt: skip
        return unchanged(before, action)

    box = Harness(tmp_path, monkeypatch, script)
    box.act("e", 0, open_body())
    step = {"action": "exec", "command": "true"}
    with pytest.raises(InfrastructureError, match="fork server is gone"):
        box.act("e", 1, step)
    failing["sandbox"] = False
    box.handler.workspaces = Workspaces(box.store)  # another worker: the workspace comes from S3
    real_get = box.store.get

    def outage(url: str) -> bytes:
        raise ArtifactError("S3 unreachable (stopping)", outage=True)

    monkeypatch.setattr(box.store, "get", outage)
    with pytest.raises(InfrastructureError, match="reading its workspace: S3 unreachable"):
        box.act("e", 1, step)
    monkeypatch.setattr(box.store, "get", real_get)
    (obs,) = observations(box.act("e", 1, step).outputs)
    assert (obs.turn, obs.status, obs.exit_code) == (1, "ok", 0)


# ---- the idle clock -------------------------------------------------------------------------------------------


def test_the_idle_clock_starts_when_the_answer_was_committed_not_when_the_action_was_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """idle_timeout_s (300 s here) is the trainer's time to answer: a step that ran 400 s (or waited 400 s in a
    backlog) has not used any of it. The timers see the episode busy until its answer is committed; from the
    first tick it is not, the trainer has idle_timeout_s."""
    box = Harness(tmp_path, monkeypatch)
    box.act("e", 0, open_body())
    box.act("e", 1, {"action": "exec", "command": "sleep 400"}, at_ms=T0_MS)  # appended at T0
    box.now_ms = T0_MS + 400_000  # answered 400 s later (a long step, or a backlog): the first quiet tick
    assert box.expire() == [], "abandoned before its trainer could see the answer"
    box.now_ms += 299_000
    assert box.expire() == []
    box.now_ms += 2_000  # 301 s after the answer: the trainer is gone
    (obs,) = observations(box.expire())
    assert (obs.turn, obs.action, obs.ended) == (2, None, "abandoned"), obs


def test_a_busy_episode_is_never_abandoned_and_the_clock_restarts_at_each_new_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = Harness(tmp_path, monkeypatch)
    box.act("e", 0, open_body(), at_ms=T0_MS)
    box.now_ms = T0_MS + 1_000_000
    assert box.expire(frozenset({b"e"})) == []  # an action of it is running or waits to be committed
    assert box.expire() == []  # answered now: the clock starts
    box.act("e", 1, {"action": "exec", "command": "true"}, at_ms=box.now_ms + 200_000)
    box.now_ms += 250_000
    assert box.expire() == []  # the first tick that sees turn 1 answered: its clock starts here
    box.now_ms += 299_000
    assert box.expire() == []
    box.now_ms += 2_000
    (obs,) = observations(box.expire())
    assert obs.ended == "abandoned"


# ---- the transcript -------------------------------------------------------------------------------------------


def test_an_ended_episodes_generation_names_its_stored_transcript(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = Harness(tmp_path, monkeypatch)
    box.act("e", 0, open_body())
    box.act("e", 1, {"action": "exec", "command": "python3 -m unittest -q tests.test_ops"})
    box.act("e", 2, {"action": "write", "path": "/etc/passwd", "text": "x"})  # rejected, its turn used
    (gen,) = generations(box.act("e", 3, {"action": "submit"}).outputs)
    assert gen.transcript_ref is not None
    assert gen.transcript_ref == box.store.url_for(gen.transcript_ref.rsplit("/", 1)[-1])  # content-addressed
    steps, omitted = steps_of(box.store.get(gen.transcript_ref))
    assert [s.line() for s in steps] == [
        f"turn 0 open {TASK_ID}: ok",
        "turn 1 exec python3 -m unittest -q tests.test_ops: ok (exit 0)",
        "turn 2 write /etc/passwd (1 bytes): rejected",
        "turn 3 submit: ok",
    ]
    assert omitted == 0
    # an episode the worker submits when its time is up has one too, ending with why
    box.act("late", 0, open_body(), at_ms=box.now_ms)
    box.now_ms += 3_601_000
    (timed_out,) = generations(box.expire())
    assert timed_out.transcript_ref is not None
    assert [s.action for s in steps_of(box.store.get(timed_out.transcript_ref))[0]] == ["open", "end"]

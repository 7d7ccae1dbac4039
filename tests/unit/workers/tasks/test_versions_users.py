"""Task versions (issue 24) as roles, rewards, the CLI, episodes, producers, explain and replay use them."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import orjson
import pytest

from schemas.codec import decode, encode
from schemas.events import ExecutionResult, GenerationEvent, HiddenVerdict, JudgeScore
from schemas.registry_layout import LatestVersions, latest_pointer, versions_dir
from schemas.tasks import Task, task_version
from streams.reward.join import absorb, task_versions
from tests.unit.reward_events import execution, judgement, verdict
from tests.unit.workers.grading.test_grader import LocalRunner
from tests.unit.workers.grading.test_grader import grader as local_grader
from tests.unit.workers.tasks.versions_env import ADD, RIGHT, V1, V2, WRONG, generation, legacy_registry
from workers.handler import Done, Source
from workers.judge.cache import CachedJudge
from workers.judge.rubric import RubricJudge
from workers.roles.common import RoleContext, TaskSource, UnknownTaskError
from workers.roles.executor import ExecutorHandler
from workers.roles.judging import JudgeHandler
from workers.roles.verifier import VerifierHandler
from workers.tasks.registry import TaskRegistry

SOURCE = Source("rs.generations", 0, 3)


# ---- the roles ----------------------------------------------------------------------------------------------


def _context(registry: TaskRegistry, role: str) -> RoleContext:
    return RoleContext(role=role, worker="host:1", tasks=TaskSource(registry), artifacts=None, output_topic="out")


def _verdict(handler: VerifierHandler, event: GenerationEvent) -> HiddenVerdict:
    done = handler.handle(event, SOURCE)
    assert isinstance(done, Done)
    assert done.log is not None
    verdict = decode(done.outputs[0].value or b"", HiddenVerdict)
    assert done.log.fields["task_version"] == verdict.task_version
    return verdict


def test_roles_grade_the_latest_when_it_moves_and_a_pinned_version_as_it_was(tmp_path: Path) -> None:
    registry = TaskRegistry(tmp_path)
    registry.store([WRONG])
    verifier = VerifierHandler(_context(registry, "verifier"), local_grader(LocalRunner()))
    first = _verdict(verifier, generation())
    assert (first.passed, first.total, first.task_version) == (1, 2, V1)  # 40 + 2 is not 41
    registry.store([RIGHT])  # the same handler, its cache warm: the next read follows the pointer
    second = _verdict(verifier, generation())
    assert (second.passed, second.total, second.task_version) == (2, 2, V2)
    pinned = _verdict(verifier, generation(task_version=V1))
    assert (pinned.passed, pinned.task_version) == (1, V1)  # exactly the version named, not the latest
    executor = ExecutorHandler(_context(registry, "executor"), local_grader(LocalRunner()))
    done = executor.handle(generation(task_version=V1), SOURCE)
    assert isinstance(done, Done)
    assert decode(done.outputs[0].value or b"", ExecutionResult).task_version == V1
    judge = JudgeHandler(_context(registry, "judge"), CachedJudge(RubricJudge()))
    done = judge.handle(generation(), SOURCE)
    assert isinstance(done, Done)
    assert decode(done.outputs[0].value or b"", JudgeScore).task_version == V2


def test_a_pinned_version_the_registry_lacks_is_an_invalid_event(tmp_path: Path) -> None:
    registry = TaskRegistry(tmp_path)
    registry.store([RIGHT])
    verifier = VerifierHandler(_context(registry, "verifier"), local_grader(LocalRunner()))
    with pytest.raises(UnknownTaskError, match=f"no version {V1} of task 'T/1'"):
        verifier.handle(generation(task_version=V1), SOURCE)


def test_the_cache_holds_versions_never_the_latest(tmp_path: Path) -> None:
    registry = TaskRegistry(tmp_path)
    registry.store([WRONG])
    source = TaskSource(registry)
    assert source.task("T/1").version == V1
    registry.store([RIGHT])
    assert source.task("T/1").version == V2
    assert source.public("T/1").task.task_version == V2
    assert source.task("T/1", V1).task == WRONG
    (versions_dir(tmp_path, "T/1", hidden=True) / f"{V1}.json").unlink()
    assert source.task("T/1", V1).task == WRONG  # a version never changes: its cached copy is still right


# ---- the reward -------------------------------------------------------------------------------------------------


def _with(event: Any, version: str | None) -> Any:
    return event.model_copy(update={"task_version": version})


def test_a_reward_records_the_version_and_notes_parts_graded_against_different_ones() -> None:
    state = None
    for part in (_with(execution("g"), V1), _with(verdict("g"), V1), _with(judgement("g"), V1)):
        state = absorb(state, part, 0, 0.0).state
    assert state is not None
    assert task_versions(state) == (V1, None)
    state = state.replace(execution=_with(execution("g"), V2))
    chosen, note = task_versions(state)
    assert chosen == V1  # the verdict's: the hidden tests decide the reward
    assert note is not None
    assert f"execution {V2[:12]}" in note
    assert f"verdict {V1[:12]}" in note
    unknown = state.replace(execution=_with(execution("g"), None), judgement=None)
    assert task_versions(unknown) == (V1, None)  # a part that names none disagrees with nobody
    assert task_versions(unknown.replace(verdict=None)) == (None, None)


# ---- the CLI ------------------------------------------------------------------------------------------------


def test_tasks_load_reports_versions_and_show_prints_any(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rewardstream.cli.main import _register, app

    _register()
    runner = CliRunner()
    reg = str(tmp_path / "reg")
    for task, name in ((WRONG, "a.jsonl"), (RIGHT, "b.jsonl")):
        (tmp_path / name).write_bytes(encode(task) + b"\n")
    assert runner.invoke(app, ["tasks", "load", str(tmp_path / "a.jsonl"), "--dir", reg]).exit_code == 0
    loaded = runner.invoke(app, ["tasks", "load", str(tmp_path / "b.jsonl"), "--dir", reg])
    assert loaded.exit_code == 0, loaded.output
    assert f"updated T/1: version {V2} (was {V1})" in loaded.output
    as_json = runner.invoke(app, ["tasks", "load", str(tmp_path / "b.jsonl"), "--dir", reg, "--json"])
    assert orjson.loads(as_json.stdout)["versions"] == {"T/1": V2}
    assert orjson.loads(runner.invoke(app, ["tasks", "show", "T/1", "--dir", reg]).stdout)["task_version"] == V2
    old = orjson.loads(runner.invoke(app, ["tasks", "show", "T/1", "--dir", reg, "--version", V1]).stdout)
    assert old["task_version"] == V1
    assert "hidden_tests" not in old
    listed = orjson.loads(runner.invoke(app, ["tasks", "versions", "T/1", "--dir", reg, "--json"]).stdout)
    assert listed == {"task_id": "T/1", "latest": V2, "versions": [V1, V2]}


# ---- episodes ---------------------------------------------------------------------------------------------------


def test_an_episode_keeps_the_version_it_opened_on_and_a_fork_its_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.unit.workers.episodes.test_handler import (
        TASK_ID,
        Harness,
        generations,
        long_task,
        observations,
        open_body,
    )

    box = Harness(tmp_path, monkeypatch)
    first = task_version(long_task())
    box.act("a", 0, open_body())
    shorter = Task.model_validate({
        **long_task().model_dump(mode="json", by_alias=True),
        "episode": {**long_task().episode_limits.model_dump(mode="json"), "max_turns": 1},
    })  # fmt: skip
    TaskRegistry(tmp_path / "registry").store([shorter])  # loaded while episode a runs
    assert observations(box.act("a", 1, {"action": "exec", "command": "true"}).outputs)[0].ended is None
    assert observations(box.act("a", 2, {"action": "exec", "command": "true"}).outputs)[0].ended is None  # 30 turns
    box.act("b", 0, open_body())  # opened now: on the new version, one turn
    ended = box.act("b", 1, {"action": "exec", "command": "true"})
    assert observations(ended.outputs)[0].ended == "max_turns"
    (b_gen,) = generations(ended.outputs)
    assert (b_gen.task_id, b_gen.task_version) == (TASK_ID, task_version(shorter))
    box.act("c", 0, {"action": "fork", "from_episode": "a", "turn": 2})
    (c_gen,) = generations(box.act("c", 1, {"action": "submit"}).outputs)
    assert c_gen.task_version == first  # a fork keeps its source's version
    (a_gen,) = generations(box.act("a", 3, {"action": "submit"}).outputs)
    assert a_gen.task_version == first


# ---- producers ----------------------------------------------------------------------------------------------


def test_the_sdk_pins_the_latest_version_when_it_publishes(tmp_path: Path) -> None:
    from schemas.settings import Settings
    from streams.sdk import TrainerClient, TrainerConfig

    settings = Settings(tasks_dir=tmp_path, kafka_bootstrap="127.0.0.1:1")
    config = TrainerConfig.from_settings(settings, "run-1", producer_overrides={"log_level": 0})
    assert config.task_versions == LatestVersions(tmp_path)
    client = TrainerClient(config, consume=False)
    try:
        unpinned = client.generation("T/1", ADD, generation_id="g1")
        assert client.pinned(unpinned) is unpinned  # no such task in the registry: published unpinned
        TaskRegistry(tmp_path).store([WRONG])
        assert client.pinned(unpinned).task_version == V1
        TaskRegistry(tmp_path).store([RIGHT])
        assert client.pinned(unpinned).task_version == V2  # the latest at publish time
        own = client.generation("T/1", ADD, generation_id="g2", task_version=V1)
        assert client.pinned(own).task_version == V1  # a trainer's own pin is kept
    finally:
        client.close(flush_timeout_s=0)
    off = TrainerConfig.from_settings(settings, "run-1", task_versions=None, producer_overrides={"log_level": 0})
    quiet = TrainerClient(off, consume=False)
    try:
        assert quiet.pinned(unpinned).task_version is None
    finally:
        quiet.close(flush_timeout_s=0)


def test_a_resolver_that_gives_no_version_is_refused() -> None:
    from schemas.errors import ValidationError
    from streams.sdk import TrainerClient, TrainerConfig

    config = TrainerConfig(
        kafka={"bootstrap.servers": "127.0.0.1:1"}, generations_topic="g", rewards_topic="r", run_id="run-1",
        producer_overrides={"log_level": 0}, task_versions=lambda _task_id: "latest",
    )  # fmt: skip
    client = TrainerClient(config, consume=False)
    try:
        with pytest.raises(ValidationError, match="'latest' for T/1: not a task version"):
            client.pinned(generation())
    finally:
        client.close(flush_timeout_s=0)


def test_the_gateway_resolver_reads_the_registry_at_each_call(tmp_path: Path) -> None:
    from rewardstream.cli.serve import task_versions
    from schemas.settings import Settings

    latest = task_versions(Settings(tasks_dir=tmp_path))
    assert latest("T/1") is None
    legacy_registry(tmp_path, WRONG)
    assert latest("T/1") == V1  # a registry stored before versions: the gateway can read its digest
    TaskRegistry(tmp_path).store([RIGHT])
    assert latest("T/1") == V2
    assert latest("../x") is None


def test_submit_lines_may_pin_a_version(tmp_path: Path) -> None:
    from rewardstream.cli.submit import read_solutions
    from schemas.errors import ValidationError

    path = tmp_path / "s.jsonl"
    rows = [{"task_id": "T/1", "generation_id": "a", "code": ADD, "task_version": V1},
            {"task_id": "T/1", "generation_id": "b", "code": ADD}]  # fmt: skip
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    assert [r.task_version for r in read_solutions(path)] == [V1, None]
    path.write_bytes(orjson.dumps({**rows[0], "task_version": 7}))
    with pytest.raises(ValidationError, match=r"s.jsonl:1: task_version must be a string"):
        read_solutions(path)


# ---- explain and replay -----------------------------------------------------------------------------------------


def _versioned_story(generation_version: str | None, graded: str) -> dict[str, Any]:
    from streams.explain.story import build_story
    from streams.reward.policy import default_policy_path
    from tests.unit.explain_stories import located

    found = located(generation(generation_id="g", episode_id="g", task_version=generation_version))
    for items in found.events.values():
        for i, item in enumerate(items):
            if item.event.task_version is None and not isinstance(item.event, GenerationEvent):
                items[i] = type(item)(item.record, item.event.model_copy(update={"task_version": graded}))
    return build_story(found, [], [default_policy_path()])


def test_explain_shows_the_version_of_every_part() -> None:
    import io

    from rich.console import Console

    from rewardstream.cli.explain import _render

    story = _versioned_story(None, V1)
    assert story["generation"]["task_version"] is None
    assert {story[s]["task_version"] for s in ("execution", "verdict", "judgement", "reward")} == {V1}
    out = io.StringIO()
    _render(story, Console(file=out, width=200, soft_wrap=True, color_system=None, force_terminal=False))
    assert out.getvalue().count(f"task version  {V1}") >= 4
    assert "pinned task version" not in out.getvalue()
    assert _versioned_story(V2, V2)["generation"]["task_version"] == V2


def test_replay_pins_an_unpinned_generation_to_the_version_its_reward_records() -> None:
    from bus.scan import Record
    from schemas.events import RewardEvent
    from streams.replay.source import Selected, pinned

    def selected(event: GenerationEvent) -> Selected:
        return Selected(Record("rs.generations", 0, 1, 0, event.key(), encode(event)), event)

    def reward(gid: str, version: str | None) -> RewardEvent:
        return RewardEvent(generation_id=gid, episode_id=gid, run_id="r", task_id="T/1", reward=0.0,
                           policy_name="default", policy_version="2", task_version=version, valid=True)  # fmt: skip

    unpinned, own, old, gone = (generation(generation_id=g, episode_id=g) for g in ("u", "o", "old", "gone"))
    own = own.model_copy(update={"task_version": V2})
    chosen = [selected(e) for e in (unpinned, own, old, gone)]
    rewards = {"u": reward("u", V1), "o": reward("o", V1), "old": reward("old", None)}
    copied = pinned(chosen, rewards)
    assert decode(copied[0].record.value, GenerationEvent).task_version == V1  # as the original was graded
    assert decode(copied[0].record.value, GenerationEvent).model_copy(update={"task_version": None}) == unpinned
    assert copied[0].record.key == chosen[0].record.key
    assert [c.record.value for c in copied[1:]] == [c.record.value for c in chosen[1:]]  # byte for byte


def test_the_split_holds_whatever_the_umask(tmp_path: Path) -> None:
    import os

    old = os.umask(0o077)
    try:
        TaskRegistry(tmp_path).store([WRONG])
    finally:
        os.umask(old)
    public = versions_dir(tmp_path, "T/1", hidden=False)
    assert stat.S_IMODE(public.stat().st_mode) == 0o755
    assert stat.S_IMODE((public / f"{V1}.json").stat().st_mode) == 0o644
    assert stat.S_IMODE(latest_pointer(tmp_path, "T/1").stat().st_mode) == 0o644
    assert stat.S_IMODE(versions_dir(tmp_path, "T/1", hidden=True).stat().st_mode) == 0o700

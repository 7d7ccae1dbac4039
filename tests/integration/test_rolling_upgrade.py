"""A rolling upgrade with a minor schema bump, on real Kafka, real workers and the real reward processor.

The new code (``tests/integration/upgraded.py``) adds one optional field, ``trace_id``, to the events the
roles exchange (generation, results 1.0 -> 1.1, reward 1.1 -> 1.2). An old and a new trainer publish
throughout while the pipeline is upgraded member by member, each role's consumer group holding an old and a
new member on the same partitions for a while:

  A. all old;  B. a new reward processor joins (a new processor reads old workers' results);
  C. new executor, verifier and judge join;  D. the old workers stop (SIGTERM: the drain), so the old
  processor's partitions now get new results (an old processor reads a newer minor);  E. the old processor
  stops; the new code alone.

Every generation gets exactly one reward, of the right value, nothing goes to the DLQ, every message decodes
with the old and the new contracts, ``trace_id`` survives wherever a new member read it and is dropped
without error wherever an old one did.

The other direction, a major bump, is refused cleanly (to the DLQ, the reason naming the version): here for the
reward processor at the end (``refuse_a_major``); for a worker by
``test_workers_pipeline.py::test_invalid_events_go_to_the_dlq_with_their_source_and_reason`` (a ``"9.0"``
generation); the wording by ``tests/unit/schemas/test_codec.py`` ("unsupported major version 2 (this reader
understands 1.x)").
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from schemas import events
from schemas.codec import decode, encode
from tests.integration import upgraded
from tests.integration.reward_env import REPO, Reader, RewardEnv, reward_env
from tests.integration.sdk_env import ROLES, Problems, convert_problems, worker_environment

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

RESULTS = {"executions": "ExecutionResult", "verdicts": "HiddenVerdict", "judgements": "JudgeScore"}
PAIR_EVERY_S = 1.0  # the trainers publish one generation each this often, throughout
OLD_CODE, NEW_CODE = "rewardstream", "tests.integration.upgraded"  # what ``python -m`` runs for each version


@pytest.fixture(scope="module")
def problems(tmp_path_factory: pytest.TempPathFactory) -> Problems:
    return convert_problems(tmp_path_factory.mktemp("registry"), 4)


@dataclass
class Trainers:
    """An old and a new trainer publishing in turn from a thread: the new one's generations carry a trace."""

    env: RewardEnv
    problems: Problems
    sent: dict[str, dict[str, object]] = field(default_factory=dict)  # generation id -> what was sent
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        producer = Producer({**self.env.kafka_config, "enable.idempotence": True, "acks": "all"})
        tasks = sorted(self.problems.canonical)
        n = 0
        while not self.stop.wait(PAIR_EVERY_S):
            for version in ("old", "new"):
                task, good = tasks[n % len(tasks)], (n // len(tasks)) % 2 == 0
                code = (self.problems.canonical if good else self.problems.wrong)[task]
                gid = f"{version}-g{n}"
                common = {"generation_id": gid, "episode_id": gid, "run_id": f"{version}-run", "task_id": task,
                          "policy_version": "p1", "code": code}  # fmt: skip
                event: events.GenerationEvent
                if version == "new":
                    event = upgraded.GenerationEvent(**common, trace_id=f"trace-{n}")  # type: ignore[arg-type]
                else:
                    event = events.GenerationEvent(**common)  # type: ignore[arg-type]
                producer.produce(self.env.name("generations"), key=event.key(), value=encode(event))
                self.sent[gid] = {"trace": getattr(event, "trace_id", None), "reward": 1.0 if good else 0.0}
                n += 1
            producer.poll(0)
        assert producer.flush(30) == 0

    @contextmanager
    def running(self) -> Iterator[Trainers]:
        thread = threading.Thread(target=self.run, name="trainers", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.stop.set()
            thread.join(timeout=60)


@dataclass
class Topics:
    """read_committed readers of the results, rewards and DLQ; the raw JSON of every message."""

    env: RewardEnv
    readers: dict[str, Reader] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for role in (*RESULTS, "rewards", "dlq"):
            self.readers[role] = Reader(self.env.kafka_config, self.env.name(role))

    def raw(self, role: str) -> list[dict[str, object]]:
        return [orjson.loads(v) for v in self.readers[role].values]

    def wait(self, until: Callable[[], bool], timeout_s: float, why: str, *, dead_ok: bool = False) -> None:
        deadline = time.monotonic() + timeout_s
        while not until():
            assert dead_ok or not self.readers["dlq"].values, f"dead letters: {self.readers['dlq'].values[:3]}"
            assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {why}\n{self.env.logs()}"
            for reader in self.readers.values():
                reader.poll()

    def close(self) -> None:
        for reader in self.readers.values():
            reader.close()


def start_worker(env: RewardEnv, role: str, code: str, registry: Path, tag: str) -> subprocess.Popen[bytes]:
    """``python -m <code> worker <role>`` in the role's group (killed by the env's cleanup if still running)."""
    with (env.tmp / f"{tag}-{role}.log").open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", code, "worker", role, "--concurrency", "1"],
            cwd=REPO, env=worker_environment(env.prefix, registry, env.tmp), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    env.procs.append(proc)
    return proc


def sigterm(proc: subprocess.Popen[bytes], env: RewardEnv) -> None:
    """Stop a member as a rolling upgrade does: SIGTERM, and it drains and exits 0."""
    os.killpg(proc.pid, signal.SIGTERM)
    code = proc.wait(timeout=90)
    assert code == 0, f"exit code {code}\n{env.logs()}"


def traced(raw: dict[str, object]) -> object:
    return raw.get("trace_id")


@pytest.mark.timeout(420)
def test_a_rolling_minor_upgrade_loses_nothing_and_decodes_everything(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path, problems: Problems
) -> None:
    started = time.monotonic()
    with reward_env(kafka_config, unique_name, tmp_path) as env, env.supervised():
        topics = Topics(env)
        trainers = Trainers(env, problems)
        try:
            old_processor = env.start(tag="old-processor", module=OLD_CODE)
            old_workers = [start_worker(env, role, OLD_CODE, problems.registry_dir, "old") for role in ROLES]
            with trainers.running():
                phases: dict[str, float] = {}

                def versions(role: str) -> Counter[object]:
                    return Counter(r["schema_version"] for r in topics.raw(role))

                def results_traced_by(gid: object) -> bool:
                    return any(traced(r) for role in RESULTS for r in topics.raw(role) if r["generation_id"] == gid)

                # A. all old
                topics.wait(lambda: versions("rewards")["1.1"] >= 4, 180, "rewards of the old pipeline")
                phases["A"] = time.monotonic() - started
                # B. a new processor joins the old one's group: it reads results of the old workers
                env.start(tag="new-processor", module=NEW_CODE)
                topics.wait(lambda: versions("rewards")["1.2"] >= 2, 120, "a reward of the new processor")
                phases["B"] = time.monotonic() - started
                # C. new workers join each role's group
                for role in ROLES:
                    start_worker(env, role, NEW_CODE, problems.registry_dir, "new")
                topics.wait(lambda: all(versions(r)["1.1"] >= 2 for r in RESULTS), 120, "results of new workers")
                phases["C"] = time.monotonic() - started
                # D. the old workers leave: the old processor's partitions now get new results only
                for proc in old_workers:
                    sigterm(proc, env)
                topics.wait(
                    lambda: any(r["schema_version"] == "1.1" and results_traced_by(r["generation_id"])
                                for r in topics.raw("rewards")),
                    120, "an old processor's reward of a traced new result",
                )  # fmt: skip
                phases["D"] = time.monotonic() - started
                # E. the old processor leaves: the new code alone
                sigterm(old_processor, env)
                before_alone = set(trainers.sent)  # published while an old processor could still store their parts
                after = versions("rewards")["1.2"]
                topics.wait(lambda: versions("rewards")["1.2"] >= after + 6, 120, "rewards of the new pipeline")
                phases["E"] = time.monotonic() - started
            topics.wait(lambda: len(topics.readers["rewards"].values) >= len(trainers.sent), 180, "every reward")
            for reader in topics.readers.values():
                reader.settle()
            check(topics, trainers.sent, before_alone)
            refuse_a_major(env, topics, trainers.sent)
        finally:
            topics.close()
    done = ", ".join(f"{k} {v:.0f}s" for k, v in phases.items())
    print(f"\nrolling upgrade: {len(trainers.sent)} generations, phases done at {done}, "
          f"done at {time.monotonic() - started:.0f}s")  # fmt: skip


def check(topics: Topics, sent: dict[str, dict[str, object]], before_alone: set[str]) -> None:
    """Exactly one reward each, of the right value; the trace where a new member read it; nothing dead.

    A new processor's reward carries the trace of the parts it joined; of a generation published before the old
    processor left, it may carry none: the old processor can have stored a traced part (dropping its new field, as
    an old reader does) and handed the partition over. Never a wrong trace; published after, always the trace."""
    assert topics.readers["dlq"].values == [], "dead letters in a minor upgrade"
    rewards = topics.readers["rewards"].exactly_one_each(list(sent), "(old reader: the stock RewardEvent)")
    assert {g: r.reward for g, r in rewards.items()} == {g: s["reward"] for g, s in sent.items()}
    assert [g for g, r in rewards.items() if r.missing or not r.valid] == [], "a reward without all its parts"
    traced_results: set[object] = set()
    seen: Counter[tuple[str, str, str]] = Counter()  # (role, writer's version, traced or not)
    for role, model in RESULTS.items():
        raws = topics.raw(role)
        assert Counter(r["generation_id"] for r in raws) == Counter(list(sent)), f"{role}: not one each"
        for value, raw in zip(topics.readers[role].values, raws, strict=True):
            gid, version = raw["generation_id"], raw["schema_version"]
            decode(value, getattr(events, model))  # an old reader, whatever wrote it
            new = decode(value, upgraded.NEW[model])  # and a new one
            trace = sent[str(gid)]["trace"]
            if version == upgraded.VERSIONS[model][1]:  # a new worker: the generation's trace survives
                assert getattr(new, "trace_id", None) == trace, raw
            else:  # an old worker read it without the field, and wrote none
                assert version == upgraded.VERSIONS[model][0], raw
                assert "trace_id" not in raw, raw
            if traced(raw):
                traced_results.add(gid)
            seen[(role, str(version), "traced" if trace is not None else "untraced")] += 1
    for raw_reward, value in zip(topics.raw("rewards"), topics.readers["rewards"].values, strict=True):
        gid = raw_reward["generation_id"]
        new_reward = decode(value, upgraded.RewardEvent)
        if raw_reward["schema_version"] == "1.2":  # a new processor: the trace of the parts it joined
            expected = sent[str(gid)]["trace"] if gid in traced_results else None
            allowed = {expected, None} if gid in before_alone else {expected}
            assert new_reward.trace_id in allowed, raw_reward
        else:
            assert raw_reward["schema_version"] == "1.1", raw_reward
            assert "trace_id" not in raw_reward, raw_reward
        seen[("rewards", str(raw_reward["schema_version"]), "traced" if gid in traced_results else "untraced")] += 1
        if raw_reward["schema_version"] == "1.2" and all(
            r["schema_version"] == "1.0" for role in RESULTS for r in topics.raw(role) if r["generation_id"] == gid
        ):
            seen[("rewards", "1.2", "of old results")] += 1
    # The mix happened: old members read new generations and results, new members read old ones.
    must = [(role, v, t) for role in RESULTS for v, t in (("1.0", "traced"), ("1.1", "traced"), ("1.1", "untraced"))]
    must += [("rewards", "1.1", "traced"), ("rewards", "1.2", "traced"), ("rewards", "1.2", "of old results")]
    assert [m for m in must if not seen[m]] == [], seen
    by_writer: dict[str, Counter[str]] = defaultdict(Counter)
    for (role, version, kind), n in seen.items():
        if kind != "of old results":
            by_writer[role][version] += n
    print(f"\nmessages by writer version: { {r: dict(c) for r, c in by_writer.items()} }")


def refuse_a_major(env: RewardEnv, topics: Topics, sent: dict[str, dict[str, object]]) -> None:
    """The other direction: a result of major version 2 reaching the (new) processor goes to the DLQ with a
    reason naming the version, and changes no reward (a worker's refusal: ``test_workers_pipeline.py``)."""
    value = topics.readers["executions"].values[0]
    major = orjson.loads(value) | {"schema_version": "2.0", "generation_id": "major-2", "episode_id": "major-2"}
    env.produce_raw("executions", b"major-2", orjson.dumps(major))
    topics.wait(lambda: len(topics.readers["dlq"].values) >= 1, 60, "the major bump's dead letter", dead_ok=True)
    (letter,) = topics.readers["dlq"].letters()
    assert letter.source_topic == env.name("executions"), letter
    assert "unsupported major version 2 (this reader understands 1.x)" in letter.error, letter.error
    topics.readers["rewards"].settle()
    assert {r.generation_id for r in topics.readers["rewards"].rewards()} == set(sent)

"""The mixed load of a chaos scenario and what must hold after it.

The pipeline is ``sdk_env.pipeline`` (executor, verifier, judge and the reward processor as processes) plus an
episode worker and the HTTP gateway (``rewardstream serve``), all pointed at the test's own cluster by their
environment (``cluster.CLIENT_ENV``) and at the machine's shared S3. The load is a trainer (``TrainerClient``)
publishing one-shot HumanEval generations at a steady pace (canonical solutions: reward 1.0; wrong ones: 0.0)
while agent episodes (``EpisodeClient``) step through a workspace task and submit (fixed: 1.0; left buggy: 0.0)
and a sandbox client calls the gateway's ``/run_code`` (retrying a 503 or 504 as verl's client does), so the
fault lands in the middle of all three. Afterwards the topics themselves are read: exactly one reward per
generation and episode, exactly one observation per step, every reward the fault-free one, every run answered
right, and how long recovery took.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import orjson
import requests

from bus.admin import delete_topics
from bus.partition_reader import read_to_end
from rewardstream.pipeline import supervised as supervised_command
from schemas.codec import decode
from schemas.episodes import ObservationEvent
from schemas.events import RewardEvent
from schemas.topics import catalog_for, topic_for
from streams.sdk import TrainerClient, TrainerConfig
from streams.sdk.episodes import Episode, EpisodeClient, EpisodeConfig
from tests.integration.reward_env import PARTITIONS, REPO
from tests.integration.sdk_env import Pipeline, Problems, pipeline
from tests.sandbox.swe_task import OPS_FIXED, task
from workers.roles.episode_worker import clock_topic, state_changelog
from workers.tasks.registry import TaskRegistry

EPISODE_TASK = "swe/chaos-calc"
RUN_TESTS = "python3 -m unittest -q tests.test_ops"
#: How long one action may wait for its observation, one reward for its generation: a stall fails the test, a
#: slow recovery is reported (the backlog took 178-193 s in quiet runs, 130 s for the coordinator kill under CI load).
ANSWER_TIMEOUT_S = 300.0
#: The gateway's port: inside the chaos module's range (19872-19899), beside the cluster's 19872-19877.
GATEWAY_PORT = 19880
GATEWAY_URL = f"http://127.0.0.1:{GATEWAY_PORT}"
#: What each ``/run_code`` call runs, and what it must print.
RUN_CODE = "import sys\nprint(sum(range(10)), sys.stdin.read().strip())"
RUN_STDIN, RUN_STDOUT = "chaos", "45 chaos\n"
#: The gateway's answers a sandbox client retries (verl's does): Kafka unreachable, or no executor in time.
RETRIED = frozenset({502, 503, 504})


def store_episode_task(registry_dir: Path) -> None:
    """The workspace task the episodes play, next to the HumanEval tasks in the workers' registry."""
    TaskRegistry(registry_dir).store([task("call", EPISODE_TASK)])


@contextmanager
def chaos_pipeline(
    kafka_config: dict[str, str], unique_name: str, tmp: Path, registry_dir: Path, *, concurrency: int = 1
) -> Iterator[Pipeline]:
    """``sdk_env.pipeline`` and an episode worker process, each worker under the restarting supervisor as in
    production (a Kafka client in a fatal state exits and comes back: crash-only); the caller has put the
    cluster (and the S3 bucket) in the environment. Every process is killed by the pipeline's teardown (by
    pid), the topics deleted."""
    # The roles fetch an episode's submitted workspace from S3: they need their artifact store.
    stores = {"RS_WORKER_STORE_ARTIFACTS": "true"}
    with pipeline(kafka_config, unique_name, tmp, registry_dir, concurrency=concurrency, supervised=True,
                  extra_env=stores) as pipe:  # fmt: skip
        env = {**pipe.worker_env, "RS_WORKER_INSTANCE_ID": f"episode-{unique_name}",
               "RS_WORKER_COMMIT_INTERVAL_S": "0.1"}  # fmt: skip
        with (tmp / "episode.log").open("wb") as out:
            proc = subprocess.Popen(
                [*supervised_command("episode"), "worker", "episode", "--concurrency", str(concurrency)],
                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        pipe.env.procs.append(proc)
        with (tmp / "gateway.log").open("wb") as out:
            proc = subprocess.Popen(
                [*supervised_command("gateway"), "serve", "--port", str(GATEWAY_PORT)],
                cwd=REPO, env=pipe.worker_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        pipe.env.procs.append(proc)
        try:
            _wait_healthy(GATEWAY_URL, 120, pipe)
            yield pipe
        finally:
            pipe.env.stop_all()
            delete_topics([state_changelog(pipe.settings).name, clock_topic(pipe.settings).name], kafka_config)


def _wait_healthy(url: str, timeout_s: float, pipe: Pipeline) -> None:
    """Until the gateway's ``/health`` answers 200 (it reads its replies topic), or AssertionError."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if requests.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"the gateway at {url} was not healthy within {timeout_s:.0f}s\n{pipe.logs()}")
        time.sleep(0.5)


@dataclass
class Recovery:
    """Seconds from the fault to the first reward after it, and to the last reward of what was published
    before it (the backlog it left drained); the whole run's length."""

    first_reward_s: float
    backlog_s: float
    run_s: float
    #: The gateway's ``/run_code`` calls: the longest one (retries included) and the retries they took.
    run_code_max_s: float = 0.0
    run_code_retries: int = 0

    def line(self) -> str:
        return (f"first reward {self.first_reward_s:.1f}s after the fault, backlog drained after "
                f"{self.backlog_s:.1f}s, run {self.run_s:.1f}s; /run_code slowest {self.run_code_max_s:.1f}s, "
                f"{self.run_code_retries} retried")  # fmt: skip


@dataclass
class MixedLoad:
    """One trainer's generations and episodes on a running pipeline; ``start``, hurt the cluster, ``finish``."""

    pipe: Pipeline
    problems: Problems
    run_id: str
    generations: int = 24
    episodes: int = 2
    run_codes: int = 12
    pace_s: float = 0.5
    expected: dict[str, float] = field(default_factory=dict)  # generation or episode id -> its reward
    published: dict[str, float] = field(default_factory=dict)  # id -> when published (monotonic)
    arrived: dict[str, float] = field(default_factory=dict)  # id -> when its reward arrived
    rewards: dict[str, RewardEvent] = field(default_factory=dict)  # id -> the reward the SDK gave
    turns: dict[str, int] = field(default_factory=dict)  # episode id -> turns sent (open is turn 0)
    errors: list[BaseException] = field(default_factory=list)
    started: float = 0.0
    runs: list[tuple[float, float, int]] = field(default_factory=list)  # /run_code: (started, answered, retries)

    def __post_init__(self) -> None:
        settings = self.pipe.settings
        self.trainer = TrainerClient(TrainerConfig.from_settings(settings, self.run_id))
        config = EpisodeConfig.from_settings(settings, self.run_id, answer_timeout_s=ANSWER_TIMEOUT_S)
        self.episode_client = EpisodeClient(config, self.trainer)
        self._lock = threading.Lock()
        self._closed = False
        self._threads = [threading.Thread(target=self._guarded, args=(self._publish,), name="chaos-generations")]
        self._threads += [
            threading.Thread(target=self._guarded, args=(lambda n=n: self._episode(n),), name=f"chaos-episode-{n}")
            for n in range(self.episodes)
        ]
        self._threads.append(threading.Thread(target=self._guarded, args=(self._run_code,), name="chaos-run-code"))

    def start(self) -> None:
        self.started = time.monotonic()
        for thread in self._threads:
            thread.start()

    def rewarded(self) -> int:
        with self._lock:
            return len(self.arrived)

    def finish(self, timeout_s: float = ANSWER_TIMEOUT_S + 60) -> None:
        """Wait for the threads (each waits for its own rewards), then close the clients; raise what failed."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(timeout=max(1.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        self.close()
        if self.errors or alive:
            raise AssertionError(f"the load failed ({self.errors!r}; still running: {alive}): {self.missing()}\n"
                                 f"{self.pipe.logs()}")  # fmt: skip

    def missing(self) -> str:
        """What did not arrive, and where it stopped: on the rewards topic (the SDK missed it) or before."""
        with self._lock:
            waiting = sorted(set(self.expected) - set(self.arrived))
        specs = catalog_for(self.pipe.settings)
        found = {}
        for role in ("generations", "executions", "verdicts", "judgements", "rewards"):
            values = _values(dict(self.trainer.config.kafka), topic_for(role, specs).name)
            ids = {orjson.loads(v).get("generation_id") for v in values}
            found[role] = sorted(set(waiting) & ids)
        return f"no reward in the SDK for {waiting}; of these, on each topic: {found}"

    def close(self) -> None:
        """Close the clients (once; again is a no-op)."""
        if not self._closed:
            self._closed = True
            self.episode_client.close()
            self.trainer.close()

    # ---- the load ---------------------------------------------------------------------------------------

    def _guarded(self, body: object) -> None:
        try:
            body()  # type: ignore[operator]
        except BaseException as exc:
            self.errors.append(exc)

    def _publish(self) -> None:
        task_ids = sorted(self.problems.canonical)
        futures: dict[str, Future[RewardEvent]] = {}
        for i in range(self.generations):
            task_id = task_ids[i % len(task_ids)]
            good = (i // len(task_ids)) % 2 == 0
            gid = f"{self.run_id}-g{i}"
            code = (self.problems.canonical if good else self.problems.wrong)[task_id]
            self.expected[gid] = 1.0 if good else 0.0
            self.published[gid] = time.monotonic()
            futures[gid] = self.trainer.publish(self.trainer.generation(task_id, code, generation_id=gid))
            futures[gid].add_done_callback(partial(self._arrived, gid))
            time.sleep(self.pace_s)  # the trainer's pace, not a wait for a condition
        self.trainer.flush(ANSWER_TIMEOUT_S)
        for future in futures.values():
            future.result(timeout=ANSWER_TIMEOUT_S)

    def _episode(self, n: int) -> None:
        """Open, read, run the tests, fix (even n) or not, run them again, submit."""
        episode: Episode = self.episode_client.open(EPISODE_TASK, timeout_s=ANSWER_TIMEOUT_S)
        self.published[episode.episode_id] = time.monotonic()
        self.expected[episode.episode_id] = 1.0 if n % 2 == 0 else 0.0
        episode.read("calc/ops.py")
        episode.exec(RUN_TESTS)
        time.sleep(self.pace_s * 4)  # an agent thinking: the episode spans the fault
        if n % 2 == 0:
            episode.write("calc/ops.py", OPS_FIXED)
        episode.exec(RUN_TESTS)
        reward = episode.reward_future()
        episode.check_submitted(episode.act({"action": "submit"}))
        self.turns[episode.episode_id] = episode.turn
        self._arrive(episode.episode_id, reward.result(timeout=ANSWER_TIMEOUT_S))

    def _run_code(self) -> None:
        """``run_codes`` calls of the gateway's ``/run_code``, each until it is answered (a 503 or 504 retried
        within ``ANSWER_TIMEOUT_S``, as a sandbox client does); each answer must be the right one."""
        body = {"code": RUN_CODE, "language": "python", "stdin": RUN_STDIN, "run_timeout": 10}
        with requests.Session() as session:
            for _ in range(self.run_codes):
                started, retries = time.monotonic(), 0
                while True:
                    try:
                        answer = session.post(f"{GATEWAY_URL}/run_code", json=body, timeout=ANSWER_TIMEOUT_S)
                        if answer.status_code not in RETRIED:
                            break
                    except requests.ConnectionError:  # the gateway restarting under its supervisor
                        pass
                    retries += 1
                    if time.monotonic() - started > ANSWER_TIMEOUT_S:
                        raise AssertionError(f"/run_code unanswered for {ANSWER_TIMEOUT_S:.0f}s ({retries} tries)")
                    time.sleep(1.0)  # a client's backoff, not a wait for a condition
                answer.raise_for_status()
                got = answer.json()
                stdout = (got.get("run_result") or {}).get("stdout")
                assert (got["status"], stdout) == ("Success", RUN_STDOUT), f"/run_code answered {answer.text[:500]}"
                with self._lock:
                    self.runs.append((started, time.monotonic(), retries))
                time.sleep(self.pace_s * 2)  # the client's pace

    def _arrived(self, gid: str, future: Future[RewardEvent]) -> None:
        """A reward future's callback (one that failed, e.g. closed with the client, is no reward)."""
        if future.exception() is None:
            self._arrive(gid, future.result())

    def _arrive(self, gid: str, reward: RewardEvent) -> None:
        with self._lock:
            self.arrived.setdefault(gid, time.monotonic())
            self.rewards[gid] = reward

    # ---- afterwards -------------------------------------------------------------------------------------

    def check(self, fault_at: float) -> Recovery:
        """Everything the scenario must show but the reward values, read from the topics (not only from the
        SDK, which drops a duplicate by id), and the recovery times; ``differing`` tells the values."""
        assert set(self.rewards) == set(self.expected), sorted(set(self.rewards) ^ set(self.expected))
        specs = catalog_for(self.pipe.settings)
        config = dict(self.trainer.config.kafka)
        on_topic = [decode(v, RewardEvent) for v in _values(config, topic_for("rewards", specs).name)]
        counts = Counter(r.generation_id for r in on_topic if r.run_id == self.run_id)
        assert {g: c for g, c in counts.items() if c != 1} == {}, "a reward twice on the topic"
        assert set(counts) == set(self.expected), f"rewards on the topic: {sorted(set(counts) ^ set(self.expected))}"
        observations = [decode(v, ObservationEvent) for v in _values(config, topic_for("observations", specs).name)]
        steps = Counter((o.episode_id, o.turn) for o in observations if o.episode_id in self.turns)
        wanted = {(e, t) for e, last in self.turns.items() for t in range(last + 1)}
        assert set(steps) == wanted, f"observations: {sorted(set(steps) ^ wanted)}"
        assert {k: c for k, c in steps.items() if c != 1} == {}, "an observation twice on the topic"
        letters = _values(config, topic_for("dlq", specs).name)
        assert letters == [], f"dead letters: {[orjson.loads(v).get('error') for v in letters]}"
        after = [t for t in self.arrived.values() if t > fault_at]
        before = [self.arrived[g] for g, t in self.published.items() if t <= fault_at]
        assert after, "no reward after the fault"
        assert len(self.runs) == self.run_codes, f"/run_code answered {len(self.runs)} of {self.run_codes}"
        return Recovery(
            min(after) - fault_at,
            max(before) - fault_at,
            max(self.arrived.values()) - self.started,
            max(done - began for began, done, _ in self.runs),
            sum(retries for _, _, retries in self.runs),
        )

    def differing(self) -> dict[str, RewardEvent]:
        """The rewards that differ from the fault-free ones (canonical 1.0, wrong 0.0, fixed episode 1.0)."""
        return {g: r for g, r in self.rewards.items() if r.reward != self.expected[g]}


def describe(differing: dict[str, RewardEvent]) -> str:
    return "; ".join(
        f"{g}: {r.reward} missing {r.missing} ({' / '.join(r.reasons)[:300]})" for g, r in differing.items()
    )


def _values(config: dict[str, str], topic: str) -> list[bytes]:
    """Every committed value on ``topic``, all partitions."""
    values = []
    for partition in range(PARTITIONS):
        records, _end = read_to_end(config, topic, partition, 0, group="unused", timeout_s=60)
        values += [value for _offset, _key, value in records if value is not None]
    return values

"""The soak's mixed load: one-shot generations, agent episodes and gateway ``/run_code`` calls, as a trainer and an
HTTP client send them, either closed-loop (calibration: as fast as the pipeline answers) or paced (the soak).

Why one fixed mix: the rate is given in one-shot generations per second and the other kinds ride along in a
fixed proportion (``MIX``), so "70% of capacity" means 70% of every kind at once. The kinds are taken in a
fixed interleaved order (``mix_cycle``), the same in both modes, so the calibration measures the very mix the
soak then sends. Every operation is timed by the client side (the SDK's futures, the HTTP answer): a reward's
latency is from its publish to its reward in the trainer; a step's from its action to its observation.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import requests

from benchmarks.bench_episodes import TASK_ID as EPISODE_TASK_ID
from benchmarks.bench_gateway import via_gateway
from benchmarks.capacity_kafka import TASK_ID as CALL_TASK_ID
from schemas.settings import Settings
from streams.sdk import TrainerClient, TrainerConfig
from streams.sdk.episodes import EpisodeClient, EpisodeConfig, exec_action, write_action

#: Operations of each kind per one-shot generation: an episode is 4 actions (open, write, exec, submit) and one
#: reward; a /run_code call is one executor run without a reward.
MIX = {"generation": 20, "run_code": 5, "episode": 2}
#: Longest wait for any one answer (a reward, an observation, an HTTP reply) before the operation is an error.
OP_TIMEOUT_S = 120.0
#: Threads sending operations: more than the pipeline holds in flight at capacity, so the client never caps it.
MAX_IN_FLIGHT = 64
RIGHT = "def f():\n    return 1\n"
WRONG = "def f():\n    return 2\n"


@dataclass(frozen=True)
class Sample:
    """One answer the client got: ``kind`` reward, step or run_code; when (monotonic) and how long it took."""

    kind: str
    at: float
    latency_s: float


def mix_cycle() -> Iterator[str]:
    """The kinds in ``MIX`` proportion, interleaved (not 20 generations then 5 calls then 2 episodes)."""
    total = sum(MIX.values())
    slots = sorted((i * total / n, kind) for kind, n in MIX.items() for i in range(n))
    return itertools.cycle([kind for _pos, kind in slots])


class MixedLoad:
    """The clients (one trainer, one episode client sharing it, an HTTP session) and what they saw."""

    def __init__(self, settings: Settings, gateway_url: str, run_id: str) -> None:
        self.run_id = run_id
        self._url = gateway_url
        self.trainer = TrainerClient(TrainerConfig.from_settings(settings, run_id, policy_version="soak"))
        config = EpisodeConfig.from_settings(settings, run_id, answer_timeout_s=OP_TIMEOUT_S)
        self.episodes = EpisodeClient(config, trainer=self.trainer)
        self._session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=MAX_IN_FLIGHT, pool_maxsize=MAX_IN_FLIGHT)
        self._session.mount("http://", adapter)
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self.samples: list[Sample] = []
        self.errors: list[str] = []
        self.started: dict[str, int] = dict.fromkeys(MIX, 0)

    def close(self) -> None:
        self._session.close()
        self.episodes.close()
        self.trainer.close()

    def run(self, kind: str) -> None:
        """One operation of ``kind``; an exception is kept as an error (the soak fails on any), never raised."""
        with self._lock:
            self.started[kind] += 1
        try:
            {"generation": self._generation, "run_code": self._run_code, "episode": self._episode}[kind]()
        except Exception as exc:  # every failure is reported at the end; the load goes on
            with self._lock:
                self.errors.append(f"{kind}: {type(exc).__name__}: {exc}")

    def _record(self, kind: str, started: float) -> None:
        now = time.monotonic()
        with self._lock:
            self.samples.append(Sample(kind, now, now - started))

    def _generation(self) -> None:
        n = next(self._counter)
        event = self.trainer.generation(CALL_TASK_ID, RIGHT if n % 2 else WRONG, generation_id=f"{self.run_id}-{n}")
        started = time.monotonic()
        reward = self.trainer.publish(event).result(timeout=OP_TIMEOUT_S)
        if reward.reward != (1.0 if n % 2 else 0.0):
            raise RuntimeError(f"{event.generation_id}: reward {reward.reward}, expected {n % 2}")
        self._record("reward", started)

    def _run_code(self) -> None:
        started = time.monotonic()
        via_gateway(self._session, self._url)
        self._record("run_code", started)

    def _episode(self) -> None:
        started = time.monotonic()
        episode = self.episodes.open(EPISODE_TASK_ID, timeout_s=OP_TIMEOUT_S)
        self._record("step", started)
        for action in (write_action("notes.txt", "soak\n"), exec_action("cat notes.txt")):
            started = time.monotonic()
            obs = episode.act(action)
            if obs.status != "ok":
                raise RuntimeError(f"episode {episode.episode_id} turn {obs.turn}: {obs.status} {obs.reason}")
            self._record("step", started)
        started = time.monotonic()
        episode.submit(timeout_s=OP_TIMEOUT_S)
        self._record("reward", started)

    def since(self, start: float) -> list[Sample]:
        """The samples answered at or after ``start`` (monotonic)."""
        with self._lock:
            return [s for s in self.samples if s.at >= start]


def closed_loop(load: MixedLoad, seconds: float, threads: int = MAX_IN_FLIGHT) -> None:
    """``threads`` clients, each sending its next operation as soon as its last was answered, for ``seconds``."""
    kinds = mix_cycle()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client() -> None:
        while time.monotonic() < deadline:
            with lock:
                kind = next(kinds)
            load.run(kind)

    workers = [threading.Thread(target=client, name=f"soak-calibrate-{i}") for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


class Paced:
    """Operations started at a steady ``rate`` (one-shot generations/s, the rest in ``MIX`` proportion) on a
    pool of ``MAX_IN_FLIGHT`` threads; ``backlog`` is how many wait for a thread (the pipeline fell behind)."""

    def __init__(self, load: MixedLoad, rate: float) -> None:
        if rate <= 0:
            raise ValueError(f"the rate must be positive, got {rate}")
        self._load = load
        self._interval = MIX["generation"] / (rate * sum(MIX.values()))
        self._pool = ThreadPoolExecutor(MAX_IN_FLIGHT, thread_name_prefix="soak-op")
        self._stop = threading.Event()
        self._submitted = 0
        self._running = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pace, name="soak-pacer", daemon=True)
        self._thread.start()

    @property
    def backlog(self) -> int:
        with self._lock:
            return self._submitted - self._running

    def _op(self, kind: str) -> Callable[[], None]:
        def run() -> None:
            with self._lock:
                self._running += 1
            self._load.run(kind)

        return run

    def _pace(self) -> None:
        kinds = mix_cycle()
        due = time.monotonic()
        while not self._stop.is_set():
            due += self._interval
            with self._lock:
                self._submitted += 1
            self._pool.submit(self._op(next(kinds)))
            self._stop.wait(max(0.0, due - time.monotonic()))

    def stop(self) -> None:
        """No new operations; wait for every started one to be answered (or to time out as an error)."""
        self._stop.set()
        self._thread.join()
        self._pool.shutdown(wait=True)

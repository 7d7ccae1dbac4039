"""Helpers for reward processor tests: unique topics, the processor as a subprocess, events, a rewards reader."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from bus.admin import delete_topics, ensure_topics
from schemas.codec import decode, encode
from schemas.events import (
    DeadLetter,
    Event,
    ExecutionResult,
    HiddenVerdict,
    JudgeScore,
    RewardEvent,
)
from schemas.settings import Settings
from schemas.topics import catalog, topic_for
from streams.reward.policy import default_policy_path
from streams.reward.processor import RESTART_EXIT_CODE
from tests.integration.platform_env import shared_cache

PARTITIONS = 3
REPO = Path(__file__).resolve().parents[2]


@dataclass
class RewardEnv:
    """Unique topics (prefix) for one test, and what it started."""

    prefix: str
    kafka_config: dict[str, str]
    tmp: Path
    app_id: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    restarts: int = 0
    _args: dict[int, tuple[Path | None, str, int | None, str, str]] = field(default_factory=dict)

    def name(self, role: str) -> str:
        return topic_for(role, catalog(self.prefix, PARTITIONS)).name  # type: ignore[arg-type]

    def start(
        self,
        policy: Path | None = None,
        tag: str = "p",
        kill_after: int | None = None,
        engine: str = "kafka",
        module: str = "rewardstream",
    ) -> subprocess.Popen[bytes]:
        """The processor as a subprocess, logging to tmp/<tag>-N.log (``module``: what ``python -m`` runs, e.g. a
        wrapper that upgrades the code first)."""
        env = {
            **os.environ,
            "RS_TOPIC_PREFIX": self.prefix,
            "RS_TOPIC_PARTITIONS": str(PARTITIONS),
            "RS_CACHE_DIR": str(shared_cache(self.tmp)),
            "PYTHONWARNINGS": "ignore",
        }
        cmd = [
            sys.executable,
            "-m",
            module,
            "reward",
            "run",
            "--app-id",
            self.app_id,
            "--tick",
            "0.2",
            "--engine",
            engine,
            "--metrics-port",
            "0",
        ]
        if engine == "faust":
            cmd += ["--data-dir", str(self.tmp / "data"), "--stall-timeout", "8"]
        if policy is not None:
            cmd += ["--policy", str(policy)]
        if kill_after is not None:
            cmd += ["--kill-after-rewards", str(kill_after)]
        out = open(self.tmp / f"{tag}-{len(self.procs)}.log", "wb")  # noqa: SIM115
        try:
            proc = subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            out.close()
        self.procs.append(proc)
        self._args[proc.pid] = (policy, tag, kill_after, engine, module)
        return proc

    def supervise(self) -> None:
        """What ``up --pipeline`` must do: restart a processor that stopped itself (stall watchdog, code 70)."""
        for proc in list(self.procs):
            if proc.poll() == RESTART_EXIT_CODE and proc.pid in self._args:
                policy, tag, kill_after, engine, module = self._args.pop(proc.pid)
                self.restarts += 1
                self.start(policy, tag, kill_after, engine, module)

    @contextmanager
    def supervised(self) -> Iterator[None]:
        """``supervise`` every half second in a thread until the block ends: for tests whose waits do not."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(0.5):
                self.supervise()

        thread = threading.Thread(target=loop, name="processor-supervisor", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=30)

    def live(self, tag: str = "p") -> subprocess.Popen[bytes]:
        """The running processor started as ``tag``: after a restart code 70 it is the supervisor's new one, not
        the process the test started (crash-only recovery is the design; the test's SIGKILL must hit the live one)."""
        self.supervise()
        live = [p for p in self.procs if p.poll() is None and self._args.get(p.pid, (None, ""))[1] == tag]
        assert live, f"no live processor tagged {tag!r}\n{self.logs()}"
        return live[-1]

    def logs(self, tail: int | None = 6000) -> str:
        """The processors' output (each file's last ``tail`` characters; None: all of it)."""
        texts = ((p.name, p.read_text(errors="replace")) for p in sorted(self.tmp.glob("*.log")))
        return "\n".join(f"==> {name} <==\n{t if tail is None else t[-tail:]}" for name, t in texts)

    def diagnose(self) -> str:
        """Ask live processors to log every task's stack (SIGUSR1), then return all logs."""
        live = [p for p in self.procs if p.poll() is None]
        sizes = {p: sum(f.stat().st_size for f in self.tmp.glob("*.log")) for p in live}
        for proc in live:
            os.kill(proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while live and time.monotonic() < deadline:
            if sum(f.stat().st_size for f in self.tmp.glob("*.log")) > max(sizes.values()) + 2000:
                break
            time.sleep(0.1)
        return self.logs(tail=20000)

    def metric(self, name: str, **labels: str) -> float:
        """A sample of the live processor's /metrics (the URL its banner logged), summed over the samples whose
        labels include ``labels``; 0 when there is none."""
        found = re.findall(r"rewards: policy .*metrics on (http://\S+/metrics)", self.logs(tail=None))
        assert found, self.logs()
        with urllib.request.urlopen(found[-1], timeout=10) as reply:  # noqa: S310 - the processor, on loopback
            text = reply.read().decode()
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name and labels.items() <= sample.labels.items()
        )

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)

    def produce(self, events: Sequence[Event]) -> None:
        producer = Producer({**self.kafka_config, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
        roles = {ExecutionResult: "executions", HiddenVerdict: "verdicts", JudgeScore: "judgements"}
        for event in events:
            producer.produce(self.name(roles[type(event)]), key=event.key(), value=encode(event))
            producer.poll(0)
        assert producer.flush(30) == 0

    def produce_in_transaction(self, events: Sequence[Event], *, abort: bool = False) -> None:
        """As the workers do: one Kafka transaction (committed, or aborted as by a worker killed mid-run)."""
        producer = Producer({**self.kafka_config, "transactional.id": f"{self.app_id}-txn", "linger.ms": 5})
        roles = {ExecutionResult: "executions", HiddenVerdict: "verdicts", JudgeScore: "judgements"}
        producer.init_transactions(30)
        producer.begin_transaction()
        for event in events:
            producer.produce(self.name(roles[type(event)]), key=event.key(), value=encode(event))
            producer.poll(0)
        if abort:
            assert producer.flush(30) == 0  # on the broker first: an abort purges what was not sent yet
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)

    def produce_raw(self, role: str, key: bytes, value: bytes) -> None:
        producer = Producer(self.kafka_config)
        producer.produce(self.name(role), key=key, value=value)
        assert producer.flush(30) == 0


class Reader:
    """A read_committed reader of every partition of a topic, from the beginning."""

    def __init__(self, kafka_config: dict[str, str], topic: str) -> None:
        self.consumer = Consumer(
            {
                **kafka_config,
                "group.id": "unused",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "log_level": 3,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.values: list[bytes] = []

    def poll(self) -> None:
        for msg in self.consumer.consume(1000, timeout=0.2):
            assert msg.error() is None, msg.error()
            self.values.append(msg.value() or b"")

    def wait(
        self,
        until: Callable[[], bool],
        timeout_s: float,
        why: str,
        env: RewardEnv | None = None,
        missing: Callable[[], object] | None = None,
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while not until():
            if env is not None:
                env.supervise()
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout_s}s waiting for {why}; missing: {missing() if missing else '?'}\n"
                    f"{env.diagnose() if env else ''}"
                )
            self.poll()

    def settle(self, quiet_s: float = 3.0) -> None:
        """Poll until nothing new arrived for ``quiet_s`` (a late duplicate would arrive now)."""
        quiet_until, seen = time.monotonic() + quiet_s, len(self.values)
        while time.monotonic() < quiet_until:
            self.poll()
            if len(self.values) != seen:
                seen, quiet_until = len(self.values), time.monotonic() + quiet_s

    def exactly_one_each(self, generations: list[str], context: str = "") -> dict[str, RewardEvent]:
        """After the stream settled: assert one reward per generation, none twice, none foreign; by generation."""
        self.settle()
        counts = Counter(r.generation_id for r in self.rewards())
        assert {g: c for g, c in counts.items() if c != 1} == {}, f"duplicate rewards {context}"
        assert set(counts) == set(generations), f"missing {sorted(set(generations) - set(counts))[:20]} {context}"
        return {r.generation_id: r for r in self.rewards()}

    def rewards(self) -> list[RewardEvent]:
        return [decode(v, RewardEvent) for v in self.values]

    def letters(self) -> list[DeadLetter]:
        return [decode(v, DeadLetter) for v in self.values]

    def close(self) -> None:
        self.consumer.close()


def short_deadline_policy(tmp_path: Path, deadline_s: float = 3.0, retry_s: float = 600.0) -> Path:
    """The default policy with a short deadline (tests should not wait 30 s for a missing judge)."""
    text = default_policy_path().read_text()
    text = text.replace("deadline_s = 30.0", f"deadline_s = {deadline_s}")
    text = text.replace("sandbox_retry_s = 600.0", f"sandbox_retry_s = {retry_s}")
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


@contextmanager
def reward_env(kafka_config: dict[str, str], unique_name: str, tmp: Path) -> Iterator[RewardEnv]:
    """Topics under a unique prefix, deleted (with the reward processor's changelog) afterwards; replicated as
    the environment's settings say (three times on a three-broker cluster: ``RS_KAFKA_BROKERS=3``)."""
    prefix = f"{unique_name}."
    specs = catalog(prefix, PARTITIONS, Settings().kafka.replication_factor())
    ensure_topics(specs, kafka_config)
    env = RewardEnv(prefix, kafka_config, tmp, app_id=f"{unique_name}-app")
    try:
        yield env
    finally:
        env.stop_all()
        internal = [t for t in AdminClient({**kafka_config}).list_topics(timeout=30).topics if t.startswith(env.app_id)]
        delete_topics([s.name for s in specs] + internal, kafka_config)

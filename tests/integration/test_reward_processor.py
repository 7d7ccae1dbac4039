"""The reward processor (both engines) against the real Kafka: join, policy, deadline, DLQ, crash recovery."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from bus.admin import ensure_topics
from bus.changelog import changelog_name, changelog_spec
from schemas.codec import encode
from schemas.events import Event
from schemas.topics import catalog, topic_for
from streams.reward.policy import PUBLIC_PASSED_HIDDEN_FAILED
from streams.reward.processor import RESTART_EXIT_CODE
from tests.integration.reward_env import PARTITIONS, Reader, RewardEnv, reward_env, short_deadline_policy
from tests.unit.reward_events import execution, judgement, verdict

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize("engine", ["kafka", "faust"])
def test_what_the_infrastructure_decided_is_an_invalid_reward_and_counted(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path, engine: str
) -> None:
    """A sandbox_error no retry replaced, and a required part that never came: each ends as an invalid reward
    saying why (never a silent 0, never training data), counted by reason in the processor's /metrics."""
    with reward_env(kafka_config, unique_name, tmp_path) as env:
        env.start(short_deadline_policy(tmp_path, deadline_s=2.0, retry_s=4.0), engine=engine)
        broken, lost = "g-broken", "g-lost"
        env.produce(
            [
                execution(broken), verdict(broken, status="sandbox_error"), judgement(broken),
                execution(lost), judgement(lost),  # the verdict never comes
            ]
        )  # fmt: skip
        rewards = Reader(kafka_config, env.name("rewards"))
        try:
            rewards.wait(lambda: len(rewards.values) >= 2, 90, "2 rewards", env)
            by_gen = rewards.exactly_one_each([broken, lost])
            assert (by_gen[broken].reward, by_gen[broken].valid, by_gen[broken].invalid_reason) == (
                0.0, False, "sandbox_error",
            )  # fmt: skip
            assert any("sandbox_error in verdict" in r for r in by_gen[broken].reasons)
            assert (by_gen[lost].reward, by_gen[lost].valid, by_gen[lost].invalid_reason) == (
                0.0, False, "missing_signals",
            )  # fmt: skip
            invalid = "rewardstream_invalid_rewards_total"
            deadline = time.monotonic() + 30
            while env.metric(invalid) < 2:
                assert time.monotonic() < deadline, env.logs()
                time.sleep(0.2)
            assert env.metric(invalid, reason="sandbox_error") == 1.0
            assert env.metric(invalid, reason="missing_signals") == 1.0
            assert env.metric("rewardstream_missing_signals_total", part="verdict") == 1.0
        finally:
            rewards.close()


@pytest.mark.parametrize("engine", ["kafka", "faust"])
def test_join_rewards_deadline_and_dlq(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path, engine: str
) -> None:
    """Both engines join, apply the policy and the deadline, and dead-letter what is invalid."""
    with reward_env(kafka_config, unique_name, tmp_path) as env:
        env.start(short_deadline_policy(tmp_path), engine=engine)
        good, wrong, hack, overfit, nojudge, retried = (
            f"g-{n}" for n in ("good", "wrong", "hack", "overfit", "nojudge", "retry")
        )
        env.produce(
            [
                execution(good),
                verdict(good),
                judgement(good),
                execution(wrong, passed=0),
                verdict(wrong, passed=1),
                judgement(wrong),
                execution(hack),
                verdict(hack, flags=("exit_call",)),
                judgement(hack),
                execution(overfit),
                verdict(overfit, passed=1),
                judgement(overfit),
                execution(nojudge),
                verdict(nojudge),  # judge worker stopped: never judged
                execution(retried),
                verdict(retried, status="sandbox_error"),
                judgement(retried),
            ]
        )
        env.produce_raw("verdicts", b"broken", b'{"not": "a verdict"}')
        rewards = Reader(kafka_config, env.name("rewards"))
        dlq = Reader(kafka_config, env.name("dlq"))
        try:
            rewards.wait(lambda: len(rewards.values) >= 5, 90, "5 rewards", env)
            by_gen = {r.generation_id: r for r in rewards.rewards()}
            assert by_gen[good].reward == 1.0
            assert by_gen[good].missing == []
            assert {i.role for i in by_gen[good].inputs} == {"execution", "verdict", "judgement"}
            assert by_gen[good].policy_name == "default"
            assert by_gen[good].policy_version == "2"
            assert by_gen[good].components["judge"] == pytest.approx(0.8)
            assert by_gen[wrong].reward == 0.0
            assert by_gen[hack].reward == 0.0
            assert "exit_call" in by_gen[hack].flags
            assert by_gen[overfit].reward == 0.0
            assert PUBLIC_PASSED_HIDDEN_FAILED in by_gen[overfit].flags
            assert "public passed, hidden failed" in by_gen[overfit].reasons
            # the judge never answered: the reward still came, after the deadline, naming what was missing
            assert by_gen[nojudge].missing == ["judgement"]
            assert by_gen[nojudge].reward == 1.0
            # valid for training: the candidate's own failures and hacks never make a reward invalid, nor does a
            # judge that is not required
            assert {by_gen[g].valid for g in (good, wrong, hack, overfit, nojudge)} == {True}
            assert retried not in by_gen, "a sandbox_error must never become a reward"
            # the retry arrives: now it gets its reward
            env.produce([verdict(retried, attempt=2)])
            rewards.wait(lambda: any(r.generation_id == retried for r in rewards.rewards()), 60, "retried", env)
            assert {r.generation_id: r for r in rewards.rewards()}[retried].reward == 1.0
            dlq.wait(lambda: len(dlq.values) >= 1, 30, "dead letter", env)
            letter = dlq.letters()[0]
            assert letter.source_topic == env.name("verdicts")
            assert letter.component == "rewards"
            assert "generation_id" in letter.error
            assert letter.original_key() == b"broken"
            assert Counter(r.generation_id for r in rewards.rewards()).most_common(1)[0][1] == 1
            # Both engines count what the alerts read: rewards by outcome (RewardsLate, latency), dead letters.
            metrics = _metrics(tmp_path)
            assert 'rewardstream_rewards_total{outcome="partial",role="rewards"} 1.0' in metrics
            assert 'rewardstream_rewards_total{outcome="complete",role="rewards"} 5.0' in metrics
            assert 'rewardstream_reward_seconds_count{role="rewards"} 6.0' in metrics
            assert 'rewardstream_dead_letters_total{reason="DecodeError",role="rewards"} 1.0' in metrics
        finally:
            rewards.close()
            dlq.close()


def _metrics(tmp_path: Path) -> str:
    """The running processor's /metrics, at the address its log announced."""
    import re
    import urllib.request

    for log in sorted(tmp_path.glob("*.log")):
        if match := re.search(r"metrics on (http://\S+/metrics)", log.read_text(errors="replace")):
            with urllib.request.urlopen(match.group(1), timeout=5) as response:  # noqa: S310 - loopback
                return str(response.read().decode())
    raise AssertionError("no processor log names its metrics endpoint")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the processor's session; one that exited on its own just now (code 70) is already what a kill makes."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def test_transactional_inputs_judge_stopped_and_aborted_results(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path
) -> None:
    """Inputs written in transactions, as the workers write them: results of an aborted transaction (a worker
    killed mid-run) are never joined, and when the judge stops for good (its partitions end in a commit
    marker, not a record) the deadline still lets every reward out, listing the judge as missing."""
    n = 60
    gens = [f"gen-{i:03d}" for i in range(n)]
    judged, unjudged = gens[: n // 2], gens[n // 2 :]
    with reward_env(kafka_config, unique_name, tmp_path) as env:
        env.start(short_deadline_policy(tmp_path, deadline_s=3.0))
        rewards = Reader(kafka_config, env.name("rewards"))
        try:
            # a killed verifier's transaction: verdicts that say every hidden case failed, never committed
            env.produce_in_transaction([verdict(g, passed=0) for g in gens], abort=True)
            env.produce_in_transaction([e for g in judged for e in (execution(g), verdict(g), judgement(g))])
            rewards.wait(lambda: len(rewards.values) >= len(judged), 90, "the judged rewards", env)
            # the judge is gone from now on: its topic's partitions end with the commit marker above
            env.produce_in_transaction([e for g in unjudged for e in (execution(g), verdict(g))])
            rewards.wait(
                lambda: len({r.generation_id for r in rewards.rewards()}) >= n,
                90,
                "rewards after the deadline with the judge stopped",
                env,
                missing=lambda: sorted(set(gens) - {r.generation_id for r in rewards.rewards()}),
            )
            by_gen = rewards.exactly_one_each(gens)
            assert {g: by_gen[g].reward for g in gens} == dict.fromkeys(gens, 1.0), "an aborted verdict was joined"
            assert [g for g in unjudged if by_gen[g].missing != ["judgement"]] == []
            assert [g for g in judged if by_gen[g].missing != []] == []
        finally:
            rewards.close()


def test_sigkill_mid_run_exactly_one_reward_each(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path
) -> None:
    """SIGKILL the processor while it emits; after the restart every generation has exactly one reward."""
    n = 600
    gens = [f"gen-{i:04d}" for i in range(n)]
    no_judge = set(gens[::10])  # judge absent: these go through the deadline timer, across the kills
    events = []
    for i, gid in enumerate(gens):
        events += [execution(gid), verdict(gid, passed=3 if i % 3 else 2)]
        if gid not in no_judge:
            events.append(judgement(gid))
    with reward_env(kafka_config, unique_name, tmp_path) as env:
        policy = short_deadline_policy(tmp_path, deadline_s=2.0)
        rewards = Reader(kafka_config, env.name("rewards"))
        try:
            started = time.monotonic()
            env.start(policy)
            env.produce(events[: len(events) // 2])
            rewards.wait(lambda: len(rewards.values) >= n // 6, 90, "first rewards", env)
            _kill(env.live())
            killed_at = [len(rewards.values)]
            env.produce(events[len(events) // 2 :])
            env.start(policy)
            rewards.wait(
                lambda: len({r.generation_id for r in rewards.rewards()}) >= n,
                120,
                "all rewards",
                env,
                missing=lambda: sorted(set(gens) - {r.generation_id for r in rewards.rewards()}),
            )
            elapsed = time.monotonic() - started
            by_gen = rewards.exactly_one_each(gens)
            wrong_missing = {
                g: by_gen[g].missing for g in gens if by_gen[g].missing != (["judgement"] if g in no_judge else [])
            }
            assert not wrong_missing, wrong_missing
            assert all(by_gen[g].reward == (1.0 if i % 3 else 0.0) for i, g in enumerate(gens))
            recovered = env.logs(tail=None).count("marked emitted")
            print(
                f"\n{n} generations, killed at {killed_at} rewards, {recovered} markers recovered from the "
                f"rewards topic, all rewarded after {elapsed:.1f}s, {env.restarts} stall restarts"
            )
        finally:
            rewards.close()


@pytest.mark.parametrize("kills", [3])
def test_repeated_sigkills_exactly_one_reward_each(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path, kills: int
) -> None:
    """Several SIGKILLs in one run, each while rewards flow and input is still arriving: none lost, none twice."""
    n = 900
    gens = [f"gen-{i:04d}" for i in range(n)]
    no_judge = set(gens[::10])
    batches: list[list[Event]] = [[] for _ in range(kills + 1)]
    for i, gid in enumerate(gens):  # each generation's parts in one batch: a deadline must not split them
        batch = batches[i * (kills + 1) // n]
        batch += [execution(gid), verdict(gid, passed=3 if i % 3 else 2)]
        if gid not in no_judge:
            batch.append(judgement(gid))
    with reward_env(kafka_config, unique_name, tmp_path) as env:
        policy = short_deadline_policy(tmp_path, deadline_s=2.0)
        rewards = Reader(kafka_config, env.name("rewards"))
        try:
            env.start(policy)
            killed_at = []
            for batch in batches[:-1]:
                before = len(rewards.values)
                env.produce(batch)

                def more_rewards(b: int = before) -> bool:
                    return len(rewards.values) >= b + n // 10

                rewards.wait(more_rewards, 90, "more rewards", env)
                _kill(env.live())
                killed_at.append(len(rewards.values))
                env.start(policy)
            env.produce(batches[-1])
            rewards.wait(
                lambda: len({r.generation_id for r in rewards.rewards()}) >= n,
                180,
                "all rewards",
                env,
                missing=lambda: sorted(set(gens) - {r.generation_id for r in rewards.rewards()}),
            )
            by_gen = rewards.exactly_one_each(gens, f"(killed at {killed_at})")
            wrong = {
                g: (by_gen[g].reward, by_gen[g].missing, by_gen[g].reasons)
                for i, g in enumerate(gens)
                if by_gen[g].reward != (1.0 if i % 3 else 0.0)
            }
            assert wrong == {}, f"killed at {killed_at}\n{env.logs(tail=3000)}"
            print(f"\n{n} generations, {kills} kills at {killed_at} rewards, {env.restarts} stall restarts")
        finally:
            rewards.close()


def test_killed_between_reward_and_marker_no_duplicate(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path
) -> None:
    """The worst moment: killed right after a reward reached the broker, before it is marked emitted.

    The reward sits in a transaction that never commits; the restarted processor re-reads those inputs
    (their offsets were not committed) and emits the reward once, in a transaction that does.
    """
    n = 150
    gens = [f"gen-{i:04d}" for i in range(n)]
    events = [e for gid in gens for e in (execution(gid), verdict(gid), judgement(gid))]
    with reward_env(kafka_config, unique_name, tmp_path) as env:
        rewards = Reader(kafka_config, env.name("rewards"))
        try:
            env.produce(events)
            for kill_after in (40, 30):
                code = RESTART_EXIT_CODE
                while code == RESTART_EXIT_CODE:  # a stalled processor stops itself; the supervisor restarts it
                    proc = env.start(kill_after=kill_after)
                    try:
                        code = proc.wait(timeout=90)
                    except subprocess.TimeoutExpired:
                        pytest.fail(f"processor neither killed itself nor exited\n{env.diagnose()}")
                assert code == -signal.SIGKILL, env.logs()
            env.start()
            rewards.wait(lambda: len({r.generation_id for r in rewards.rewards()}) >= n, 120, "all rewards", env)
            rewards.exactly_one_each(gens)
            # each kill left an open transaction holding a reward: read_committed readers never see it
        finally:
            rewards.close()


def test_two_processors_one_killed_the_other_takes_over(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path
) -> None:
    """Scale-out: two processors share the partitions; one is SIGKILLed mid-run and never comes back."""
    n = 400
    gens = [f"gen-{i:04d}" for i in range(n)]
    events = [e for gid in gens for e in (execution(gid), verdict(gid), judgement(gid))]
    with reward_env(kafka_config, unique_name, tmp_path) as env:
        rewards = Reader(kafka_config, env.name("rewards"))
        try:
            env.start(tag="a")
            env.start(tag="b")
            rewards.wait(lambda: "Setting newly assigned partitions" in env.logs(tail=None), 60, "assignment", env)
            env.produce(events[: len(events) // 2])
            rewards.wait(lambda: len(rewards.values) >= n // 8, 90, "first rewards", env)
            _kill(env.live("a"))
            env.produce(events[len(events) // 2 :])
            rewards.wait(lambda: len({r.generation_id for r in rewards.rewards()}) >= n, 120, "all rewards", env)
            rewards.exactly_one_each(gens)
        finally:
            rewards.close()


def test_changelog_rows_from_another_version_do_not_stop_the_processor(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path
) -> None:
    """An upgrade keeps its changelog: the Faust engine's watermarks ('#' keys, also written by this engine
    before the emit-then-mark split) and a row that is no join state are left out of the restored table; they
    used to fail every batch, so the processor restarted forever (seen running `make demo` on an old cache)."""
    gens = [f"gen-{i:03d}" for i in range(30)]
    events: list[Event] = []
    for gid in gens:
        events += [execution(gid), verdict(gid, passed=3), judgement(gid)]
    with reward_env(kafka_config, unique_name, tmp_path) as env:
        executions = topic_for("executions", catalog(env.prefix, PARTITIONS))
        ensure_topics([changelog_spec(env.app_id, executions)], kafka_config)
        producer = Producer(kafka_config)
        for partition in range(executions.partitions):
            producer.produce(changelog_name(env.app_id), key=f"#watermark/{partition}".encode(), value=b"14",
                             partition=partition)  # fmt: skip
        producer.produce(changelog_name(env.app_id), key=b"gen-corrupt", value=b"{not json", partition=0)
        assert producer.flush(30) == 0
        rewards = Reader(kafka_config, env.name("rewards"))
        try:
            env.start(short_deadline_policy(tmp_path))
            env.produce(events)
            rewards.wait(lambda: len(rewards.values) >= len(gens), 90, "rewards after an old changelog", env)
            by_gen = rewards.exactly_one_each(gens)
            assert all(by_gen[g].reward == 1.0 for g in gens)
            assert all(p.poll() is None for p in env.procs), env.logs()
            assert "ignoring changelog row 'gen-corrupt', not a join state" in env.logs()
        finally:
            rewards.close()


class _BusyVerifier:
    """Stands in for a verifier working through a backlog: its consumer group commits, step by step, the
    generations it finished, while the ones under test stay unfinished. Its last step writes their verdicts
    and its offsets in one transaction, as the worker does: a verifier never goes quiet between the two."""

    def __init__(self, env: RewardEnv, kafka_config: dict[str, str]) -> None:
        self.env = env
        self.topic = env.name("generations")
        self.consumer = Consumer(
            {**kafka_config, "group.id": f"{env.prefix}verifier", "enable.auto.commit": False, "log_level": 3}
        )
        # ready before the backlog starts, so that the last step is one transaction and nothing more
        self.producer = Producer({**kafka_config, "transactional.id": f"{env.prefix}verifier-txn", "linger.ms": 5})
        self.producer.init_transactions(30)
        self.done = 0

    def finish_one_more(self, limit: int) -> None:
        """Commit one more finished generation on every partition, never past ``limit``."""
        self.done = min(self.done + 1, limit)
        offsets = [TopicPartition(self.topic, p, self.done) for p in range(PARTITIONS)]
        self.consumer.commit(offsets=offsets, asynchronous=False)

    def finish_everything(self, verdicts: list[Event]) -> None:
        """Write ``verdicts`` and commit every generation, atomically."""
        ends = [self.consumer.get_watermark_offsets(TopicPartition(self.topic, p))[1] for p in range(PARTITIONS)]
        self.producer.begin_transaction()
        for event in verdicts:
            self.producer.produce(self.env.name("verdicts"), key=event.key(), value=encode(event))
        offsets = [TopicPartition(self.topic, p, end) for p, end in enumerate(ends)]
        self.producer.send_offsets_to_transaction(offsets, self.consumer.consumer_group_metadata(), 30)
        self.producer.commit_transaction(30)

    def close(self) -> None:
        self.consumer.close()


@pytest.mark.parametrize("engine", ["kafka", "faust"])
def test_a_verifier_working_through_a_backlog_is_waited_for_a_stopped_one_is_not(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path, engine: str
) -> None:
    """Under a backlog the verifier works on other generations for longer than the deadline while these
    generations' verdicts topic stays quiet: that is not a dead verifier, and rewarding them then would score
    correct code 0.0 for the time it queued. Once the verifier stops committing, the deadline applies."""
    deadline_s, fillers = 3.0, 60
    queued = [f"queued-{i}" for i in range(6)]
    orphans = [f"orphan-{i}" for i in range(6)]
    with reward_env(kafka_config, unique_name, tmp_path) as env:
        env.start(short_deadline_policy(tmp_path, deadline_s=deadline_s), engine=engine)
        rewards = Reader(kafka_config, env.name("rewards"))
        verifier = _BusyVerifier(env, kafka_config)
        producer = Producer(kafka_config)
        try:
            env.produce([execution("warm-up"), verdict("warm-up"), judgement("warm-up")])
            rewards.wait(lambda: len(rewards.values) >= 1, 90, "the processor to start", env)
            # the backlog ahead of the queued generations, on every partition, then the queued ones themselves
            for p in range(PARTITIONS):
                for i in range(fillers):
                    producer.produce(env.name("generations"), key=f"filler-{p}-{i}".encode(), value=b"{}", partition=p)
            for gid in queued:
                producer.produce(env.name("generations"), key=execution(gid).key(), value=b"{}")
            assert producer.flush(30) == 0
            env.produce([e for g in queued for e in (execution(g), judgement(g))])
            working_until = time.monotonic() + 4 * deadline_s
            while time.monotonic() < working_until:
                verifier.finish_one_more(limit=fillers)
                rewards.poll()
                time.sleep(0.25)  # the pace of a busy verifier's commits, not a wait for a condition
            early = [r.generation_id for r in rewards.rewards() if r.generation_id in queued]
            assert early == [], f"rewarded while the verifier was still working toward them: {early}"
            verifier.finish_everything([verdict(g) for g in queued])
            rewards.wait(
                lambda: {r.generation_id for r in rewards.rewards()} >= set(queued), 60, "the queued rewards", env
            )

            # a verifier that stopped for good: its backlog stays, it commits nothing more
            for gid in orphans:
                producer.produce(env.name("generations"), key=execution(gid).key(), value=b"{}")
            assert producer.flush(30) == 0
            env.produce([e for g in orphans for e in (execution(g), judgement(g))])
            everyone = ["warm-up", *queued, *orphans]
            rewards.wait(
                lambda: {r.generation_id for r in rewards.rewards()} >= set(everyone),
                90,
                "rewards at the deadline with the verifier stopped",
                env,
                missing=lambda: sorted(set(everyone) - {r.generation_id for r in rewards.rewards()}),
            )
            by_gen = rewards.exactly_one_each(everyone)
            assert {g: (tuple(by_gen[g].missing), by_gen[g].reward) for g in queued} == dict.fromkeys(queued, ((), 1.0))
            assert {g: tuple(by_gen[g].missing) for g in orphans} == dict.fromkeys(orphans, ("verdict",))
        finally:
            producer.flush(10)
            verifier.close()
            rewards.close()

"""Agent episodes from a trainer: open, act, fork, submit, and go on after a restart.

Why this shape: one trainer process drives thousands of episodes, so actions go out through one idempotent
producer and observations come back through one consumer that reads every partition of the observations
topic from where it stood when the client started, resolving one future per (episode, turn). The trainer
numbers the turns and the worker's exactly-once rests on them: a resent action is a duplicate, never a second
step. ``resume`` reads an episode's observations back to learn its last answered turn, so a restarted trainer
goes on from the committed episode. The reward of a submit comes through the trainer client: one reward per
episode, ``generation_id`` = ``episode_id``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypeVar

import pydantic
from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from bus.clients import consume_available, make_producer, make_reader
from bus.keys import partition_for
from bus.partition_reader import read_to_end
from bus.scan import watermarks
from schemas.codec import DecodeError, decode, encode, one_line, problems_of
from schemas.episodes import ActionEvent, AnyAction, ObservationEvent
from schemas.errors import RewardstreamError, ValidationError
from schemas.events import RewardEvent
from schemas.settings import S3Settings, Settings
from schemas.topics import catalog_for, topic_for
from streams.sdk.claims import Claim, ContentStore, Inline, Outgoing, Withheld, route, unsendable, withheld_observation
from streams.sdk.client import TrainerClient
from streams.sdk.config import SdkError

log = logging.getLogger("rewardstream.sdk.episodes")

#: An observation that will arrive: ``result(timeout)`` raises ``TimeoutError`` if it does not in time.
ObservationFuture = Future[ObservationEvent]

#: Ends after which the worker grades the workspace, so the episode gets its reward (an abandoned one gets none).
GRADED_ENDS = ("submitted", "max_turns", "episode_timeout")

T = TypeVar("T")

_POLL_S = 0.1
_UNCLAIMED_MAX = 100_000  # observations nobody waits for yet (a resume in progress), kept by (episode, turn)


class EpisodeError(SdkError):
    """An episode action could not be sent or answered, or the episode cannot go on."""


@dataclass(frozen=True)
class EpisodeConfig:
    """Where actions go and observations come back from; ``run_id``/``policy_version`` label the episodes."""

    kafka: Mapping[str, str]
    actions_topic: str
    observations_topic: str
    run_id: str
    policy_version: str = "0"
    #: How long an action waits for its observation unless told (a step runs at most its step_timeout_s).
    answer_timeout_s: float = 300.0
    #: The episode worker's S3: where a write too large for one message goes by claim check (None: such a
    #: write is answered ``rejected`` here, not sent).
    s3: S3Settings | None = None

    @classmethod
    def from_settings(cls, settings: Settings, run_id: str, **overrides: Any) -> EpisodeConfig:
        """Topic names, the Kafka connection and the S3 store from the one settings object."""
        specs = catalog_for(settings)
        overrides.setdefault("s3", settings.s3)
        return cls(
            kafka=settings.kafka_client_config(),
            actions_topic=topic_for("actions", specs).name,
            observations_topic=topic_for("observations", specs).name,
            run_id=run_id,
            **overrides,
        )


class EpisodeClient:
    """Episodes of one trainer; use as a context manager. ``trainer`` (optional) brings the submits' rewards."""

    def __init__(
        self, config: EpisodeConfig, trainer: TrainerClient | None = None, *, start_timeout_s: float = 30.0
    ) -> None:
        self.config = config
        self.trainer = trainer
        self._cond = threading.Condition()
        self._futures: dict[tuple[str, int], ObservationFuture] = {}
        self._unclaimed: OrderedDict[tuple[str, int], ObservationEvent] = OrderedDict()
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._content: ContentStore | None = None
        self._producer: Producer = make_producer(config.kafka, **{"linger.ms": 2})
        try:
            self._start = {p: high for p, (_low, high) in watermarks(config.kafka, config.observations_topic).items()}
            self._consumer: Consumer = make_reader(config.kafka, f"rewardstream-episodes-{uuid.uuid4().hex[:12]}")
            self._consumer.assign([TopicPartition(config.observations_topic, p, o) for p, o in self._start.items()])
        except (KafkaException, RewardstreamError) as exc:
            self._producer.flush(0)
            raise EpisodeError(f"cannot read {config.observations_topic}: {exc}") from exc
        self._thread = threading.Thread(target=self._consume, name="rs-episode-observations", daemon=True)
        self._thread.start()
        del start_timeout_s  # the watermarks above are the start; nothing else to wait for

    # ---- episodes ---------------------------------------------------------------------------------------

    def open(self, task_id: str, *, episode_id: str | None = None, timeout_s: float | None = None) -> Episode:
        """A new episode of ``task_id`` (a fresh id unless given), once the worker answered its open."""
        episode = Episode(self, episode_id or new_episode_id(), 0)
        body = open_action(task_id, self.config.run_id, self.config.policy_version)
        episode.opened = started(episode.act(body, timeout_s=timeout_s), f"open task {task_id!r}")
        return episode

    def fork(
        self, from_episode: str, turn: int, *, episode_id: str | None = None, timeout_s: float | None = None
    ) -> Episode:
        """A new episode of this client's run from ``from_episode``'s workspace after ``turn`` (a committed turn;
        the source may be any run's): its reward comes to this client's run, under its policy version."""
        child = Episode(self, episode_id or new_episode_id(), 0)
        body = fork_action(from_episode, turn, self.config.run_id, self.config.policy_version)
        child.opened = started(child.act(body, timeout_s=timeout_s), f"fork episode {from_episode!r} at turn {turn}")
        return child

    def resume(self, episode_id: str, *, timeout_s: float = 60.0) -> Episode:
        """The episode as its observations say: a restarted trainer goes on from its last answered turn.

        Only the episode's own partition of the observations and actions topics is read (``bus.keys``). An
        action sent before the restart and not answered yet is waited for (up to ``timeout_s``), so the
        episode returned has no action in flight: the trainer's next action is the next turn, never a turn an
        earlier action already holds. An episode that ended (a later rejection says 'has ended') is ended."""
        deadline = time.monotonic() + timeout_s
        key = episode_id.encode()
        partition = partition_for(key, len(self._start))
        seen = [obs for obs in self._records(self.config.observations_topic, partition, key, timeout_s, _decoded)]
        sent = [event.turn for event in self._records(self.config.actions_topic, partition, key, timeout_s,
                                                      _decoded_action)]  # fmt: skip
        with self._cond:
            seen += [obs for (eid, _turn), obs in self._unclaimed.items() if eid == episode_id]
        found = standing(seen, sent)
        if found is not None and found.pending and found.ended is None:
            seen.append(self._pending_answer(episode_id, found.pending[-1], deadline))
            found = standing(seen, sent)
        if found is None:
            raise EpisodeError(f"episode {episode_id!r} has no observation on {self.config.observations_topic}")
        episode = Episode(self, episode_id, found.turn)
        episode.ended = found.ended
        return episode

    def _records(
        self, topic: str, partition: int, key: bytes, timeout_s: float, decoded: Callable[[bytes], T | None]
    ) -> list[T]:
        """The decoded records of ``key`` on ``topic[partition]``, from its start to its end now."""
        records, _end = read_to_end(
            self.config.kafka, topic, partition, 0,
            group=f"rewardstream-episodes-resume-{uuid.uuid4().hex[:8]}", timeout_s=timeout_s,
        )  # fmt: skip
        found = (decoded(value) for _offset, k, value in records if k == key and value is not None)
        return [record for record in found if record is not None]

    def _pending_answer(self, episode_id: str, turn: int, deadline: float) -> ObservationEvent:
        """The observation of an action sent before a restart (it may come now: the consumer is reading)."""
        key = (episode_id, turn)
        future = self._future(key)
        wait_s = max(0.0, deadline - time.monotonic())
        try:
            return future.result(timeout=wait_s)
        except FutureTimeout:
            raise EpisodeError(
                f"episode {episode_id!r}: the action of turn {turn}, sent before the restart, has no observation "
                f"within {wait_s:.0f}s; resume again once the episode worker has answered it"
            ) from None
        finally:
            self.forget(key, future)

    # ---- the machinery ----------------------------------------------------------------------------------

    def send(self, event: ActionEvent) -> ObservationFuture:
        """Publish ``event`` and return the future of its observation (registered before it can arrive)."""
        self._raise_if_failed()
        key = (event.episode_id, event.turn)
        future = self._future(key)
        value = encode(event)

        def delivered(err: object, _msg: Message) -> None:
            if err is not None and not future.done():
                future.set_exception(EpisodeError(f"action {key} was not published: {err}"))

        while True:
            try:
                self._producer.produce(self.config.actions_topic, value=value, key=event.key(), on_delivery=delivered)
                break
            except BufferError:
                self._producer.poll(_POLL_S)
        self._producer.poll(0)
        return future

    def claimed(self, claim: Claim) -> Inline | Withheld:
        """A write too large for one message, its bytes in S3 (blocking: an upload); withheld when this client
        has no S3. Raises ``ContentUploadError`` (an ``SdkError``) when S3 fails: the infrastructure's."""
        if self.config.s3 is None:
            return unsendable(claim)
        with self._cond:
            if self._content is None:
                self._content = ContentStore.from_settings(self.config.s3)
            store = self._content
        return store.claimed(claim)

    def _future(self, key: tuple[str, int]) -> ObservationFuture:
        """The future of (episode, turn)'s observation, registered before it can arrive (done at once when the
        consumer read it already)."""
        with self._cond:
            future = self._futures.get(key)
            if future is None:
                future = self._futures[key] = ObservationFuture()
                future.set_running_or_notify_cancel()
                early = self._unclaimed.pop(key, None)
                if early is not None:
                    future.set_result(early)
        return future

    def answer(self, future: ObservationFuture, key: tuple[str, int], timeout_s: float | None) -> ObservationEvent:
        """The observation ``future`` stands for; EpisodeError naming the episode and turn if it does not come."""
        wait_s = self.wait_s(timeout_s)
        try:
            return future.result(timeout=wait_s)
        except FutureTimeout:
            raise self.no_answer(key, wait_s) from None
        finally:
            self.forget(key, future)

    def wait_s(self, timeout_s: float | None) -> float:
        """How long an answer is waited for: ``timeout_s``, else the config's ``answer_timeout_s``."""
        return self.config.answer_timeout_s if timeout_s is None else timeout_s

    @staticmethod
    def no_answer(key: tuple[str, int], wait_s: float) -> EpisodeError:
        """The error of an observation that did not come in time (the same words sync and async)."""
        return EpisodeError(f"no observation for episode {key[0]!r} turn {key[1]} within {wait_s:g}s")

    def forget(self, key: tuple[str, int], future: ObservationFuture) -> None:
        """Drop the future of ``key`` once answered (a waiter that gave up leaves it for a later resend)."""
        with self._cond:
            if future.done() and self._futures.get(key) is future:
                del self._futures[key]

    def _consume(self) -> None:
        try:
            while not self._stop.is_set():
                self._producer.poll(0)
                for msg in consume_available(self._consumer, 500, _POLL_S):
                    if msg.error() is not None:
                        log.warning("observations: %s", msg.error())
                        continue
                    value = msg.value()
                    obs = _decoded(value) if value is not None else None
                    if obs is not None:
                        self._deliver(obs)
        except BaseException as exc:  # the consumer died: every waiter learns why
            self._fail(exc)

    def _deliver(self, obs: ObservationEvent) -> None:
        key = (obs.episode_id, obs.turn)
        with self._cond:
            future = self._futures.get(key)
            if future is None:
                self._unclaimed[key] = obs
                if len(self._unclaimed) > _UNCLAIMED_MAX:
                    self._unclaimed.popitem(last=False)
                return
        if not future.done():
            future.set_result(obs)

    def _fail(self, exc: BaseException) -> None:
        with self._cond:
            self._error = exc
            waiting = list(self._futures.values())
        for future in waiting:
            if not future.done():
                future.set_exception(EpisodeError(f"the observations consumer stopped: {exc}"))

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise EpisodeError(f"the observations consumer stopped: {self._error}")

    def close(self, flush_timeout_s: float = 30.0) -> None:
        """Send what is queued and stop reading (observations still on their way are left on the topic)."""
        self._stop.set()
        self._thread.join(timeout=10)
        left = self._producer.flush(flush_timeout_s)
        self._consumer.close()
        if left:
            raise EpisodeError(f"{left} action(s) not published within {flush_timeout_s:g}s")

    def __enter__(self) -> EpisodeClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class Episode:
    """One episode: each call is one turn (exactly one observation back), in order; ``turn`` is the last one."""

    def __init__(self, client: EpisodeClient, episode_id: str, turn: int) -> None:
        self.client = client
        self.episode_id = episode_id
        self.turn = turn
        self.opened: ObservationEvent | None = None
        self.ended: str | None = None
        self._withheld: ObservationEvent | None = None

    def act(self, action: Mapping[str, Any] | AnyAction, *, timeout_s: float | None = None) -> ObservationEvent:
        """Send ``action`` (the contract's JSON object, or a model) as the next turn; its observation (whatever
        its size: a write too large for a message goes by claim check, see ``streams.sdk.claims``)."""
        key, future = self.begin(action)
        return self.settle(self.client.answer(future, key, timeout_s))

    def begin(self, action: Mapping[str, Any] | AnyAction) -> tuple[tuple[str, int], ObservationFuture]:
        """Publish ``action`` as the next turn without waiting: its (episode, turn) key and observation future.

        The non-blocking half of ``act`` but for a claim check's upload (the asyncio face runs that in a thread,
        see ``prepare``); hand the observation to ``settle`` so the episode knows its turn. One at a time."""
        out = self.prepare(action)
        return self.publish(self.client.claimed(out) if isinstance(out, Claim) else out)

    def prepare(self, action: Mapping[str, Any] | AnyAction) -> Outgoing:
        """``action`` as the next turn's event and how it goes out (no I/O): inline, a ``Claim`` whose bytes
        ``client.claimed`` uploads, or withheld. ValidationError when it is not an action at all."""
        if self.ended is not None:
            raise EpisodeError(f"episode {self.episode_id!r} has ended ({self.ended})")
        body = action.model_dump(mode="json") if isinstance(action, pydantic.BaseModel) else dict(action)
        starts = body.get("action") in ("open", "fork")
        turn = 0 if starts else self.turn + 1
        try:
            event = ActionEvent.model_validate({"episode_id": self.episode_id, "turn": turn, "action": body})
        except pydantic.ValidationError as exc:
            problems = one_line(problems_of(exc), "action")
            raise ValidationError(f"bad action for episode {self.episode_id!r}: {problems}") from None
        return route(event)

    def publish(self, out: Inline | Withheld) -> tuple[tuple[str, int], ObservationFuture]:
        """Send a prepared event: its key and observation future (a withheld one's is its rejection, at once)."""
        key = (out.event.episode_id, out.event.turn)
        if isinstance(out, Inline):
            return key, self.client.send(out.event)
        self._withheld = withheld_observation(out)
        future = ObservationFuture()
        future.set_running_or_notify_cancel()
        future.set_result(self._withheld)
        return key, future

    def settle(self, obs: ObservationEvent) -> ObservationEvent:
        """Take ``obs`` (the answer to the last ``begin``) as where the episode stands; return it. A withheld
        action's rejection leaves the turn as it was: the worker never saw it."""
        if obs is self._withheld:
            self._withheld = None
            return obs
        self.turn = obs.turn
        self.ended = obs.ended
        return obs

    def exec(self, command: str | list[str], timeout_s: float | None = None) -> ObservationEvent:
        """Run ``command`` in the workspace (a string under /bin/sh -c, a list as argv)."""
        return self.act(exec_action(command, timeout_s))

    def write(self, path: str, text: str | None = None, *, base64: str | None = None) -> ObservationEvent:
        """Write one file (text, or base64 for bytes)."""
        return self.act(write_action(path, text, base64))

    def read(self, path: str) -> ObservationEvent:
        """Read one file; its text is the observation's ``content``."""
        return self.act({"action": "read", "path": path})

    def fork(self, turn: int, *, episode_id: str | None = None) -> Episode:
        """A new episode from this one's workspace after ``turn`` (a committed turn of it), of the client's run."""
        return self.client.fork(self.episode_id, turn, episode_id=episode_id)

    def submit(self, timeout_s: float = 600.0) -> RewardEvent:
        """End the episode and wait for its one reward (needs the client's ``trainer``)."""
        reward = self.reward_future()
        self.check_submitted(self.act({"action": "submit"}))
        try:
            return reward.result(timeout=timeout_s)
        except FutureTimeout:
            raise self.no_reward(timeout_s) from None

    def reward_future(self) -> Future[RewardEvent]:
        """The future of this episode's one reward (register it before the submit, so it cannot be missed)."""
        trainer = self.client.trainer
        if trainer is None:
            raise EpisodeError("submit waits for the reward: give the EpisodeClient a TrainerClient")
        return trainer.future_for(self.episode_id)

    def check_submitted(self, obs: ObservationEvent) -> None:
        """EpisodeError when the worker rejected the submit (no reward will come)."""
        if obs.status == "rejected":
            raise EpisodeError(f"submit of episode {self.episode_id!r} was rejected: {obs.reason}")

    def no_reward(self, timeout_s: float) -> EpisodeError:
        """The error of a reward that did not come in time."""
        return EpisodeError(f"no reward for episode {self.episode_id!r} within {timeout_s:g}s")


@dataclass(frozen=True)
class Standing:
    """Where an episode stands: its last applied turn, why it ended (None: open), and the turns actions were
    sent at that no observation answers yet (oldest first)."""

    turn: int
    ended: str | None
    pending: tuple[int, ...]


def standing(observations: Iterable[ObservationEvent], sent: Iterable[int]) -> Standing | None:
    """Where an episode stands from its observations and the turns of its actions (None: no observation).

    The turn is the last of the unbroken run of answered turns (an out-of-order rejection answers a turn the
    episode never reached: it uses none); the end is whichever observation ended the episode (a later 'has
    ended' rejection has a higher turn and no ``ended``)."""
    answered: set[int] = set()
    ended: tuple[int, str] | None = None
    for obs in observations:
        answered.add(obs.turn)
        if obs.ended is not None and ended is None:
            ended = (obs.turn, obs.ended)
    if not answered:
        return None
    if ended is not None:
        return Standing(ended[0], ended[1], ())
    turn = min(answered)
    while turn + 1 in answered:
        turn += 1
    return Standing(turn, None, tuple(sorted({t for t in sent if t not in answered})))


def started(obs: ObservationEvent, what: str) -> ObservationEvent:
    """The answer to an open or fork, or EpisodeError saying why the worker refused to start the episode."""
    if obs.status == "rejected":
        raise EpisodeError(f"cannot {what}: {obs.reason}")
    return obs


def new_episode_id() -> str:
    """A fresh episode id (the trainer makes it: the open's key)."""
    return f"ep-{uuid.uuid4().hex}"


def exec_action(command: str | list[str], timeout_s: float | None = None) -> dict[str, Any]:
    """The contract's exec object (``timeout_s`` left out when not given: the task's step timeout)."""
    return {"action": "exec", "command": command, **({} if timeout_s is None else {"timeout_s": timeout_s})}


def write_action(path: str, text: str | None = None, base64: str | None = None) -> dict[str, Any]:
    """The contract's write object: text, or base64 for bytes."""
    return {"action": "write", "path": path, **({"text": text} if base64 is None else {"base64": base64})}


def open_action(task_id: str, run_id: str, policy_version: str) -> dict[str, Any]:
    """The contract's open object: a new episode of ``task_id`` for ``run_id``'s policy ``policy_version``."""
    return {"action": "open", "task_id": task_id, "run_id": run_id, "policy_version": policy_version}


def fork_action(
    from_episode: str, turn: int, run_id: str | None = None, policy_version: str | None = None
) -> dict[str, Any]:
    """The contract's fork object: a new episode from ``from_episode``'s workspace after ``turn``, of ``run_id``
    and ``policy_version`` (the source's when left out)."""
    labels = {"run_id": run_id, "policy_version": policy_version}
    return {"action": "fork", "from_episode": from_episode, "turn": turn,
            **{k: v for k, v in labels.items() if v is not None}}  # fmt: skip


def _decoded_action(value: bytes) -> ActionEvent | None:
    try:
        return decode(value, ActionEvent)
    except DecodeError:
        return None  # the worker dead-letters it: it has no observation to wait for


def _decoded(value: bytes) -> ObservationEvent | None:
    try:
        return decode(value, ObservationEvent)
    except DecodeError as exc:
        log.warning("observations: skipping an undecodable record: %s", exc)
        return None

"""The episode worker's handler: one action of one agent episode -> its observation, in one transaction.

For each ``ActionEvent`` the handler reads the episode's state (``workers.episodes.table``), lets
``turns.decide`` say what the action does, and carries it out: a step is one sandbox run (``run_step``) on
the committed workspace, whose new snapshot is stored in S3 *before* anything is returned; what is returned
(the observation, the episode's new state row for the changelog, and on the episode's end the generation
that names its final workspace) is committed by the worker loop in one transaction with the action's offset.
A run killed before that commit is redelivered and re-runs from the committed state: each step is applied
exactly once. A sandbox failure or an outage (the infrastructure's) raises ``StepInfraError``, which the loop
retries for as long as the worker runs; the agent never sees it and the action is never dead-lettered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from schemas.codec import encode
from schemas.episodes import ActionEvent, ForkAction, ObservationEvent, OpenAction
from schemas.errors import KafkaError
from schemas.events import GenerationEvent, LogRecord, LogValue
from schemas.settings import WorkerSettings, defaults
from schemas.status import SandboxStatus
from schemas.tasks import EpisodeLimits, PublicTask
from workers.artifacts import ArtifactError, ArtifactStore
from workers.episodes import transcript, turns
from workers.episodes.claims import claimed_bytes
from workers.episodes.observe import end_observation, step_observation, submitted
from workers.episodes.originals import BrokenOriginalError, caps_of, task_original
from workers.episodes.snapshot import Packed
from workers.episodes.sources import CommittedEpisodes
from workers.episodes.step import CAPTURE_BYTES, StepAction, StepLimits, run_step
from workers.episodes.table import EpisodeTable, dumps
from workers.episodes.turns import ClaimedWrite, EpisodeState, Rejected, Step
from workers.episodes.workspaces import Workspaces
from workers.handler import Done, InfrastructureError, InvalidEventError, Outcome, Output, Source
from workers.logs.shipper import LogShipper
from workers.roles.common import TaskSource, UnknownTaskError
from workers.roles.image_episodes import ImageEpisodeError, ImageEpisodes, empty_delta
from workers.sandbox.api import Sandbox

log = logging.getLogger(__name__)

#: Memory of a step beyond three times the workspace cap (see ``workers.episodes.step``).
_STEP_MEMORY_SLACK_MB = 128


class StepInfraError(InfrastructureError):
    """The sandbox, S3 or Kafka failed (the infrastructure's fault): the loop retries the step for as long as
    the worker runs; the agent never sees it and the action is never dead-lettered."""


@contextmanager
def _infrastructure(what: str) -> Iterator[None]:
    """An outage of S3 (past the store's own retries: the worker is stopping) or of Kafka, or the docker daemon or
    a task image failing an image task, while doing ``what`` is the infrastructure's, retried like a
    sandbox_error."""
    try:
        yield
    except ArtifactError as exc:
        if not exc.outage:
            raise
        raise StepInfraError(f"{what}: {exc}") from exc
    except (KafkaError, ImageEpisodeError) as exc:
        raise StepInfraError(f"{what}: {exc}") from exc


@dataclass(frozen=True)
class EpisodeTopics:
    """Where the handler's outputs go."""

    observations: str
    generations: str
    changelog: str


def step_limits(task: PublicTask, limits: EpisodeLimits) -> StepLimits:
    """The task's memory, at least what the workspace's tmpfs pages and its tar take."""
    memory = max(task.limits.memory_mb, 3 * limits.workspace_max_mb + _STEP_MEMORY_SLACK_MB)
    return StepLimits(memory_mb=memory, output_cap_bytes=CAPTURE_BYTES, read_cap_bytes=CAPTURE_BYTES)


@dataclass(eq=False)
class EpisodeHandler:
    """Thread-safe: the loop runs one action per episode at a time, different episodes at once. ``store`` holds
    tasks' workspace archives (S3); ``committed`` finds a fork's source on any partition. Its ``Timers`` end
    episodes no action came to in time (``turns.overdue``)."""

    topics: EpisodeTopics
    tasks: TaskSource
    sandbox: Sandbox
    workspaces: Workspaces
    table: EpisodeTable
    committed: CommittedEpisodes
    store: ArtifactStore
    #: The broker's clock now, ms (``bus.broker_clock``): what idle and overdue episodes are timed by.
    clock: Callable[[], int]
    #: Makes each action's log record (shipped to OpenSearch in the action's transaction); None: no records.
    shipper: LogShipper | None = None
    #: Image tasks' steps and submits on this worker's docker daemon; None: image tasks cannot open here.
    images: ImageEpisodes | None = None
    #: An ended episode's state is deleted this long after its last action (``Settings.worker.episode_retention_s``).
    retention_s: float = defaults(WorkerSettings).episode_retention_s
    #: (task_id, task version) -> sha256 of its original snapshot (the bytes are in ``workspaces``)
    _originals: dict[tuple[str, str], str] = field(default_factory=dict)
    #: partition -> (its epoch, episode_id -> (turn, event time in s of the first timer tick that saw that turn
    #: answered and committed)): where each episode's idle clock starts (``turns.overdue``'s ``answered_at_s``)
    _answered: dict[int, tuple[int, dict[str, tuple[int, float]]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, event: ActionEvent, source: Source) -> Outcome:
        """The outputs of ``event`` (none for a duplicate); raises only for what is worth retrying."""
        now_s = source.timestamp_ms / 1000 if source.timestamp_ms > 0 else time.time()
        state = self.table.get(source, event.episode_id)
        task = self.tasks.public(state.task_id, state.task_version).task if state is not None else None
        limits = task.episode_limits if task is not None else None
        decision = turns.decide(state, event, limits, now_s)
        if isinstance(decision, turns.Duplicate):
            return Done((), status="duplicate")
        if isinstance(decision, turns.Start):
            return self._start(event, source, now_s)
        if state is None or task is None or limits is None:  # decide rejects every action of an unknown episode
            reason = decision.reason if isinstance(decision, Rejected) else "unknown episode"
            return self._done(source, event, ObservationEvent.rejection(event, reason))
        if isinstance(decision, Rejected):
            return self._rejected(state, event, decision, limits, source=source, now_s=now_s)
        if isinstance(decision, turns.Submit):
            done = turns.ended(state, event, decision.why, now_s)
            url = self.workspaces.url_for(done.snapshot)
            return self._done(source, event, end_observation(event, decision.why, url), done, submit=True)
        return self._step(state, event, decision, task, source=source, now_s=now_s)

    # ---- the kinds of decision -------------------------------------------------------------------------
    def _start(self, event: ActionEvent, source: Source, now_s: float) -> Outcome:
        action = event.action
        if isinstance(action, OpenAction):
            started = self._open(event.episode_id, action, now_s)
        elif isinstance(action, ForkAction):
            started = self._fork(event.episode_id, action, now_s)
        else:  # decide starts only on open and fork
            raise InvalidEventError(f"a start from a {action.action} action")
        if isinstance(started, str):  # why it cannot start: the trainer's to fix, said in a rejection
            return self._done(source, event, ObservationEvent.rejection(event, started))
        observation = ObservationEvent.build(episode_id=event.episode_id, turn=0, action=action.action,
                                             status=SandboxStatus.OK,
                                             workspace_ref=self.workspaces.url_for(started.snapshot))  # fmt: skip
        return self._done(source, event, observation, started)

    def _open(self, episode_id: str, action: OpenAction, now_s: float) -> EpisodeState | str:
        """A new episode from the task's original workspace (of its latest version, which the episode keeps), or
        why there cannot be one."""
        try:
            read = self.tasks.public(action.task_id)
        except UnknownTaskError as exc:
            return str(exc)
        task = read.task
        if task.environment is not None:
            return self._open_image(episode_id, action, task, read.version, now_s)
        if task.workspace is None:
            return f"task {task.task_id} has no workspace"
        try:
            with _infrastructure(f"the original workspace of {task.task_id}"):
                sha = self._original(task, read.version)
        except BrokenOriginalError as exc:  # the task's own workspace is unusable: no episode can start
            return str(exc)
        return EpisodeState(episode_id, task.task_id, 0, sha, now_s, now_s, run_id=action.run_id,
                            policy_version=action.policy_version, history=((0, sha),),
                            task_version=read.version)  # fmt: skip

    def _open_image(
        self, episode_id: str, action: OpenAction, task: PublicTask, version: str | None, now_s: float
    ) -> EpisodeState | str:
        """An image task's episode: its state the empty delta (the image as built), or why it cannot open here."""
        if self.images is None:
            return f"task {task.task_id} is an image task: this episode worker runs no docker daemon"
        with _infrastructure(f"opening an episode of {task.task_id}"):
            refused = self.images.refusal(task)
        if refused is not None:
            return refused
        empty = empty_delta()
        with _infrastructure(f"the empty delta of {task.task_id}"):
            self.workspaces.put(empty)
        sha = empty.sha256
        return EpisodeState(episode_id, task.task_id, 0, sha, now_s, now_s, run_id=action.run_id,
                            policy_version=action.policy_version, history=((0, sha),),
                            task_version=version)  # fmt: skip

    def _fork(self, episode_id: str, action: ForkAction, now_s: float) -> EpisodeState | str:
        """A new episode from a committed turn of another (its task and task version; the fork's own run and
        policy version, or the source's when it names none), or why not."""
        with _infrastructure(f"reading the fork's source {action.from_episode}"):
            origin = self.committed.get(action.from_episode)
        if origin is None:
            return f"unknown episode {action.from_episode}"
        sha = turns.snapshot_at(origin, action.turn)
        if sha is None:
            return f"turn {action.turn} of {action.from_episode} is not a committed turn (it is at {origin.turn})"
        run_id = action.run_id if action.run_id is not None else origin.run_id
        policy = action.policy_version if action.policy_version is not None else origin.policy_version
        return EpisodeState(episode_id, origin.task_id, 0, sha, now_s, now_s, run_id=run_id, policy_version=policy,
                            history=((0, sha),), task_version=origin.task_version)  # fmt: skip

    def _rejected(
        self,
        state: EpisodeState,
        event: ActionEvent,
        decision: Rejected,
        limits: EpisodeLimits,
        *,
        source: Source,
        now_s: float,
    ) -> Outcome:
        url = self.workspaces.url_for(state.snapshot)
        observation = ObservationEvent.rejection(event, decision.reason, workspace_ref=url)
        if not decision.consumes_turn:
            return self._done(source, event, observation)
        after = turns.applied(state, event, state.snapshot, now_s)
        why = turns.ends_after(event, limits)
        if why is None:
            return self._done(source, event, observation, after)
        after = turns.ended(after, event, why, now_s)
        observation = observation.model_copy(update={"ended": why})
        return self._done(source, event, observation, after, submit=True)

    def _claimed_write(
        self,
        state: EpisodeState,
        event: ActionEvent,
        decision: ClaimedWrite,
        task: PublicTask,
        *,
        source: Source,
        now_s: float,
    ) -> Outcome:
        """A write whose bytes came by claim check: read (ours only, checked) and written as any write; a claim
        that cannot be read as it says is the agent's rejected action, an S3 outage a retry."""
        with _infrastructure(f"step {event.turn} of {event.episode_id}: reading its write's content"):
            data = claimed_bytes(self.store, decision.claim)
        if isinstance(data, str):
            rejected = Rejected(data, consumes_turn=True)
            return self._rejected(state, event, rejected, task.episode_limits, source=source, now_s=now_s)
        step = Step(StepAction.write(decision.path, data))
        return self._step(state, event, step, task, source=source, now_s=now_s)

    def _step(
        self,
        state: EpisodeState,
        event: ActionEvent,
        decision: Step | ClaimedWrite,
        task: PublicTask,
        *,
        source: Source,
        now_s: float,
    ) -> Outcome:
        if isinstance(decision, ClaimedWrite):  # its bytes are read first
            return self._claimed_write(state, event, decision, task, source=source, now_s=now_s)
        limits = task.episode_limits
        where = f"step {event.turn} of {event.episode_id}"
        with _infrastructure(f"{where}: reading its workspace"):
            before = self.workspaces.get(state.snapshot)
        if task.environment is not None:
            with _infrastructure(where):
                outcome = self._image_episodes().step(task, before, decision.action)
        else:
            outcome = run_step(self.sandbox, before, decision.action, caps_of(limits), step_limits(task, limits))
        if outcome.status == SandboxStatus.SANDBOX_ERROR:
            raise StepInfraError(f"{where}: {outcome.reason}")
        if outcome.sha256 != state.snapshot:  # stored before the observation naming it can be committed
            with _infrastructure(f"{where}: storing its workspace"):
                self.workspaces.put(Packed(outcome.snapshot, outcome.sha256, 0, len(outcome.snapshot)))
        after = turns.applied(state, event, outcome.sha256, now_s)
        why = turns.ends_after(event, limits)
        if why is None and now_s + outcome.wall_ms / 1000 - state.opened_at_s >= limits.episode_timeout_s:
            why = "episode_timeout"
        url = self.workspaces.url_for(after.snapshot)
        if why is None:
            return self._done(source, event, step_observation(event, outcome, url), after)
        after = turns.ended(after, event, why, now_s)
        return self._done(source, event, step_observation(event, outcome, url, why), after, submit=True)

    # ---- timers (the loop's ``Timers``) ---------------------------------------------------------------
    def now_ms(self) -> int:
        return self.clock()

    def expire(
        self, _topic: str, partition: int, epoch: int, clock_ms: int, busy: Collection[bytes | None]
    ) -> list[Output]:
        """End the partition's episodes overdue at ``clock_ms`` that no waiting action decides: ``abandoned``
        (idle: no generation, no reward) or ``episode_timeout`` (submitted as it is); and delete the ended ones
        past ``retention_s`` (a changelog tombstone each: the table and its topic stay the size of the
        episodes in use, not of every episode ever played). All or nothing: the table changes only once every
        output is made."""
        ends: list[tuple[EpisodeState, ObservationEvent, GenerationEvent | None]] = []
        answered = self._answered_at(partition, epoch, clock_ms / 1000, busy)
        for state in self.table.running(partition, epoch):
            if state.episode_id.encode() in busy:
                continue
            try:
                limits = self.tasks.public(state.task_id, state.task_version).task.episode_limits
            except UnknownTaskError as exc:
                log.warning("episode %s cannot be timed: %s", state.episode_id, exc)
                continue
            why = turns.overdue(state, limits, clock_ms / 1000, answered.get(state.episode_id))
            if why is None:
                continue
            after = turns.expired(state, why)
            url = self.workspaces.url_for(after.snapshot)
            reason = "no action came in time" if why == "abandoned" else "the episode's time is up"
            observation = ObservationEvent.build(
                episode_id=state.episode_id, turn=state.turn + 1, action=None, status=SandboxStatus.TIMEOUT,
                workspace_ref=url, reason=reason, ended=why,
            )  # fmt: skip
            after = transcript.noted(after, None, observation)
            ends.append((after, observation, None if why == "abandoned" else self._submitted(after)))
        outputs = [out for after, obs, gen in ends for out in self._outputs(partition, obs, after, gen)]
        now_s = clock_ms / 1000
        gone = [
            state.episode_id
            for state in self.table.ended(partition, epoch)
            if state.episode_id.encode() not in busy and now_s - state.last_action_at_s >= self.retention_s
        ]
        outputs += [Output(self.topics.changelog, e.encode(), None, partition=partition) for e in gone]
        for after, _obs, _gen in ends:
            self.table.put_at(partition, epoch, after)
        for episode_id in gone:
            self.table.forget_at(partition, epoch, episode_id)
        return outputs

    def _answered_at(
        self, partition: int, epoch: int, now_s: float, busy: Collection[bytes | None]
    ) -> dict[str, float]:
        """episode_id -> when its last answer was first seen committed (``now_s`` for a turn seen for the first
        time; the loop counts an episode busy until its last action's result is committed). Kept per
        assignment in memory: after a restart or a rebalance every running episode's idle clock starts again at
        the first tick (an abandoned episode may end up to ``idle_timeout_s`` later, a live one never early)."""
        known_epoch, seen = self._answered.get(partition, (epoch, {}))
        if known_epoch != epoch:
            seen = {}
        now: dict[str, tuple[int, float]] = {}
        for state in self.table.running(partition, epoch):
            if state.episode_id.encode() in busy:
                continue
            turn_since = seen.get(state.episode_id)
            now[state.episode_id] = turn_since if turn_since is not None and turn_since[0] == state.turn \
                else (state.turn, now_s)  # fmt: skip
        self._answered[partition] = (epoch, now)
        return {episode_id: since for episode_id, (_turn, since) in now.items()}

    # ---- helpers ---------------------------------------------------------------------------------------
    def _original(self, task: PublicTask, version: str | None) -> str:
        """The sha256 of the task's original snapshot, stored in S3 (made once per task version and worker;
        each time for a task stored before versions whose version this worker cannot tell)."""
        key = None if version is None else (task.task_id, version)
        with self._lock:
            known = None if key is None else self._originals.get(key)
        if known is not None:
            return known
        packed = task_original(task, self.store)
        self.workspaces.put(packed)
        if key is not None:
            with self._lock:
                self._originals[key] = packed.sha256
        return packed.sha256

    def _done(
        self,
        source: Source,
        event: ActionEvent,
        observation: ObservationEvent,
        state: EpisodeState | None = None,
        *,
        submit: bool = False,
    ) -> Done:
        """The outputs of one action: its observation, the episode's new state (``event``'s line added to its
        transcript) and, when ``submit``, the generation of its final workspace. The table gets the new state
        last (nothing after it can raise)."""
        generation: GenerationEvent | None = None
        if state is not None:
            state = transcript.noted(state, event, observation)
            if submit:
                generation = self._submitted(state)
        outputs = self._outputs(source.partition, observation, state, generation)
        record = self._record(source, observation, state)
        if state is not None:
            self.table.put(source, state)
        return Done(tuple(outputs), log=record, status=observation.status)

    def _submitted(self, state: EpisodeState) -> GenerationEvent:
        """The generation of an ended episode, its transcript stored first (content-addressed, in S3); an image
        task's names its final WORKDIR, stored first too (what its verifier grades)."""
        with _infrastructure(f"storing the transcript of {state.episode_id}"):
            stored = self.store.put(transcript.document(state), "application/json")
        task = self.tasks.public(state.task_id, state.task_version).task
        if task.environment is None:
            return submitted(state, self.workspaces.url_for(state.snapshot), stored.url)
        where = f"the submit of {state.episode_id}"
        with _infrastructure(where):
            delta = self.workspaces.get(state.snapshot)
        with _infrastructure(where):
            workdir = self._image_episodes().final_workdir(task, delta)
        with _infrastructure(where):
            url = self.workspaces.put(workdir)
        return submitted(state, url, stored.url, workspace_sha256=workdir.sha256)

    def _image_episodes(self) -> ImageEpisodes:
        if self.images is None:
            raise StepInfraError("an image task's episode on a worker that runs no docker daemon")
        return self.images

    def _record(self, source: Source, observation: ObservationEvent, state: EpisodeState | None) -> LogRecord | None:
        """What SREs find of this action: the episode, the turn, how it ended, where it was read."""
        if self.shipper is None:
            return None
        fields: dict[str, LogValue] = {"turn": observation.turn, "action": observation.action,
                                       "status": observation.status, "wall_ms": observation.wall_ms,
                                       "ended": observation.ended}  # fmt: skip
        message = f"{observation.action} turn {observation.turn}: {observation.status}"
        return self.shipper.record(
            "warning" if observation.status == "rejected" else "info",
            message + (f" ({observation.reason})" if observation.reason else ""),
            fields=fields, episode_id=observation.episode_id, run_id=state.run_id if state else None,
            task_id=state.task_id if state else None, topic=source.topic, partition=source.partition,
            offset=source.offset,
        )  # fmt: skip

    def _outputs(
        self,
        partition: int,
        observation: ObservationEvent,
        state: EpisodeState | None,
        generation: GenerationEvent | None,
    ) -> list[Output]:
        key = observation.key()
        outputs = [Output(self.topics.observations, key, encode(observation))]
        if state is not None:
            outputs.append(Output(self.topics.changelog, key, dumps(state), partition=partition))
        if generation is not None:
            outputs.append(Output(self.topics.generations, generation.key(), encode(generation)))
        return outputs

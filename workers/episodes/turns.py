"""What the episode worker does with one action, given the episode's committed state: pure, so every rule of
the contract (turn order, duplicates, limits, the end of an episode) is decided in one place and tested alone.

Why pure: the worker is stateless; the state is the last committed one (restored from its changelog), the
clock is the action's broker timestamp (``rs.actions`` is ``LogAppendTime``: a trainer's own timestamp could
stop every limit's clock). Replaying the same actions on the same state gives the same decisions, on any
worker, after any crash. The clock of a state never runs backwards (``applied``/``ended`` keep the latest).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, replace

from schemas.episodes import (
    ActionEvent,
    ContentClaim,
    EndReason,
    ExecAction,
    ForkAction,
    OpenAction,
    ReadAction,
    SubmitAction,
    WriteAction,
    action_problem,
    claim_of,
    write_size,
)
from schemas.tasks import EpisodeLimits
from workers.episodes.step import StepAction

#: Most workspace changes an episode's state remembers for forks (the oldest go first): a row stays small.
MAX_FORK_POINTS = 1000
#: One line of an episode's transcript (``workers.episodes.transcript``): turn, action kind, what it named,
#: status, exit code.
TranscriptLine = tuple[int, str, str, str, int | None]


@dataclass(frozen=True, slots=True)
class EpisodeState:
    """An episode as committed after its last applied turn. ``snapshot``: the sha256 of its workspace then;
    times are event times in seconds. ``history``: (turn, snapshot) at the start and at each turn that changed
    the workspace, what a fork from any committed turn starts from (``snapshot_at``). ``transcript``: the last
    lines of what the agent did (``workers.episodes.transcript``), ``transcript_omitted`` how many earlier ones
    were dropped. ``task_version``: the version of the task pinned when it opened (a fork keeps its source's),
    which its steps, limits and submit use (None: a state from before versions, on the latest)."""

    episode_id: str
    task_id: str
    turn: int
    snapshot: str
    opened_at_s: float
    last_action_at_s: float
    ended: EndReason | None = None
    run_id: str | None = None
    policy_version: str | None = None
    history: tuple[tuple[int, str], ...] = ()
    transcript: tuple[TranscriptLine, ...] = ()
    transcript_omitted: int = 0
    task_version: str | None = None


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The turn is already applied (a redelivery or a resent action): nothing is produced again."""


@dataclass(frozen=True, slots=True)
class Rejected:
    """The action is not carried out; ``reason`` goes on a ``rejected`` observation. ``consumes_turn``: the
    turn counts (the agent's own bad action) or not (out of order, so the right turn can still come)."""

    reason: str
    consumes_turn: bool


@dataclass(frozen=True, slots=True)
class Start:
    """``open`` (from the task's workspace) or ``fork`` (from ``from_episode`` at ``from_turn``)."""

    task_id: str | None
    from_episode: str | None = None
    from_turn: int | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """Run ``action`` in a sandbox on the committed workspace."""

    action: StepAction


@dataclass(frozen=True, slots=True)
class ClaimedWrite:
    """Write the bytes ``claim`` names to ``path``: the handler reads them (our content address only, checked
    against the claim's sha256 and size) and runs the write as a step, or rejects the action if it cannot."""

    path: str
    claim: ContentClaim


@dataclass(frozen=True, slots=True)
class Submit:
    """End the episode and reward its workspace as it is; ``why`` is the end reason."""

    why: EndReason


Decision = Duplicate | Rejected | Start | Step | ClaimedWrite | Submit


def decide(  # noqa: PLR0911 - one return per rule of the contract, in the order they apply
    state: EpisodeState | None, event: ActionEvent, limits: EpisodeLimits | None, now_s: float
) -> Decision:
    """The decision for ``event`` on ``state`` (None: no such episode yet). ``limits`` are the task's (None when
    the episode is unknown). ``now_s`` is the action's event time."""
    action = event.action
    if isinstance(action, OpenAction | ForkAction):
        return _start(state, action)
    if state is None or limits is None:
        return Rejected(f"unknown episode {event.episode_id!r} (open or fork it first)", consumes_turn=False)
    if event.turn <= state.turn:
        return Duplicate()
    if state.ended is not None:
        return Rejected(f"the episode has ended ({state.ended})", consumes_turn=False)
    if event.turn != state.turn + 1:
        return Rejected(f"turn {event.turn} is out of order: the next turn is {state.turn + 1}", consumes_turn=False)
    if now_s - state.opened_at_s > limits.episode_timeout_s:
        return Submit("episode_timeout")
    if isinstance(action, SubmitAction):
        return Submit("submitted")
    if event.turn > limits.max_turns:  # the worker ends an episode at its last turn; this is a stale state's
        return Rejected(f"the episode has ended (max_turns: {limits.max_turns})", consumes_turn=False)
    problem = action_problem(action) or _workspace_problem(action, limits)
    if problem is not None:
        return Rejected(problem, consumes_turn=True)
    claim = claim_of(action)
    if isinstance(action, WriteAction) and claim is not None:
        return ClaimedWrite(action.path, claim)
    return _step(action, state, limits, now_s)


def _workspace_problem(action: ExecAction | WriteAction | ReadAction, limits: EpisodeLimits) -> str | None:
    """Why a write cannot fit the task's workspace whatever it holds (decided before any byte is read)."""
    size = write_size(action) if isinstance(action, WriteAction) else None
    cap = limits.workspace_max_mb << 20
    if size is not None and size > cap:
        return (f"write of {size} bytes is over the workspace cap ({cap} bytes: the task's episode.workspace_max_mb "
                f"is {limits.workspace_max_mb})")  # fmt: skip
    return None


def _step(
    action: ExecAction | WriteAction | ReadAction, state: EpisodeState, limits: EpisodeLimits, now_s: float
) -> Step:
    """The step of a checked action; an exec gets no more than what is left of the episode."""
    step = step_action(action, limits)
    if step.kind == "exec":
        step = replace(step, timeout_s=max(0.001, min(step.timeout_s, time_left_s(state, limits, now_s))))
    return Step(step)


def _start(state: EpisodeState | None, action: OpenAction | ForkAction) -> Duplicate | Start:
    if state is not None:
        return Duplicate()  # turn 0 of an episode that exists: its open was applied already
    if isinstance(action, OpenAction):
        return Start(task_id=action.task_id)
    return Start(task_id=None, from_episode=action.from_episode, from_turn=action.turn)


def step_action(action: ExecAction | WriteAction | ReadAction, limits: EpisodeLimits) -> StepAction:
    """The sandbox step of a checked action; an exec's ``timeout_s`` is capped to ``step_timeout_s``."""
    if isinstance(action, ExecAction):
        asked = action.timeout_s if action.timeout_s is not None else limits.step_timeout_s
        return StepAction.exec(action.command, timeout_s=min(asked, limits.step_timeout_s))
    if isinstance(action, ReadAction):
        return StepAction.read(action.path)
    if claim_of(action) is not None:
        raise ValueError("a claimed write's bytes are read by the handler (decide returns ClaimedWrite)")
    data = action.text.encode("utf-8") if action.text is not None else base64.b64decode(action.base64 or "")
    return StepAction.write(action.path, data)


def ends_after(event: ActionEvent, limits: EpisodeLimits) -> EndReason | None:
    """``max_turns`` when ``event`` is the episode's last allowed action: it is carried out, then the episode is
    submitted as it is (the trainer need not send anything more)."""
    return "max_turns" if event.turn >= limits.max_turns else None


def overdue(
    state: EpisodeState, limits: EpisodeLimits, now_s: float, answered_at_s: float | None = None
) -> EndReason | None:
    """Why an open episode ends with no action: past ``episode_timeout_s`` (submitted as it is) or idle for
    longer than ``idle_timeout_s`` (``abandoned``: an explicit end, never a silent 0); None while it may go on.

    Idle counts from when the trainer could have seen the answer to its last action (``answered_at_s``: when
    it was committed, as far as the caller knows), never from when the action was appended: a long step or a
    worker's backlog is not the trainer's time."""
    if state.ended is not None:
        return None
    if now_s - state.opened_at_s > limits.episode_timeout_s:
        return "episode_timeout"
    since = state.last_action_at_s if answered_at_s is None else max(state.last_action_at_s, answered_at_s)
    if now_s - since > limits.idle_timeout_s:
        return "abandoned"
    return None


def applied(state: EpisodeState, event: ActionEvent, snapshot: str, now_s: float) -> EpisodeState:
    """The state after ``event`` was carried out (or rejected as the agent's own bad action)."""
    history = state.history
    if snapshot != state.snapshot:
        history = (*history, (event.turn, snapshot))[-MAX_FORK_POINTS:]
    return replace(state, turn=event.turn, snapshot=snapshot, last_action_at_s=max(now_s, state.last_action_at_s),
                   history=history)  # fmt: skip


def snapshot_at(state: EpisodeState, turn: int) -> str | None:
    """The workspace ``state``'s episode had after ``turn``, or None when that turn is not committed (or is
    older than what ``history`` keeps)."""
    if turn > state.turn or not state.history or turn < state.history[0][0]:
        return None
    found = state.history[0][1]
    for changed_at, snapshot in state.history:
        if changed_at > turn:
            break
        found = snapshot
    return found


def ended(state: EpisodeState, event: ActionEvent, why: EndReason, now_s: float) -> EpisodeState:
    """The state of an episode that ``event`` ended."""
    return replace(state, turn=event.turn, ended=why, last_action_at_s=max(now_s, state.last_action_at_s))


def expired(state: EpisodeState, why: EndReason) -> EpisodeState:
    """The state of an episode ``overdue`` ended with no action: its turn stays the last applied one, so a late
    action is rejected (the episode has ended), never taken for a duplicate."""
    return replace(state, ended=why)


def time_left_s(state: EpisodeState, limits: EpisodeLimits, now_s: float) -> float:
    """What is left of ``episode_timeout_s``: an exec may not run past the episode's end."""
    return max(0.0, state.opened_at_s + limits.episode_timeout_s - now_s)

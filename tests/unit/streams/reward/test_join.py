"""The pure join state machine: when a generation's reward is emitted, held back, or given up."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import orjson
import pydantic
import pytest

from schemas.caps import item_cap
from schemas.codec import decode
from schemas.events import JudgeScore, RewardEvent
from streams.reward.join import (
    PENDING_PREFIX,
    Emit,
    GiveUp,
    JoinState,
    PartEvent,
    Wait,
    Withhold,
    absorb,
    decide,
    emitted,
    reward_id,
    uuid5_hex,
)
from streams.reward.policy import Policy, load_policy
from tests.unit.reward_events import execution, judgement, verdict, verified

T0 = 1_000_000.0


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy()


def join(*events: PartEvent, now: float = T0) -> JoinState:
    state: JoinState | None = None
    for event in events:
        state = absorb(state, event, 2, now).state
    assert state is not None
    return state


def test_waits_until_every_awaited_part_arrived(policy: Policy) -> None:
    state = join(execution("g"), verdict("g"))
    assert decide(state, T0 + 1, policy) == Wait()
    state = join(execution("g"), verdict("g"), judgement("g"))
    decision = decide(state, T0 + 1, policy)
    assert isinstance(decision, Emit)
    reward = decision.reward
    assert reward.reward == 1.0
    assert reward.missing == []
    assert [i.role for i in reward.inputs] == ["execution", "verdict", "judgement"]
    assert reward.event_id == reward_id("g", policy)
    assert (reward.policy_name, reward.policy_version) == ("default", "2")


def test_deadline_emits_with_what_is_missing(policy: Policy) -> None:
    state = join(execution("g"), verdict("g"))
    decision = decide(state, T0 + policy.join.deadline_s, policy)
    assert isinstance(decision, Emit)
    assert decision.reward.missing == ["judgement"]
    assert decision.reward.reward == 1.0


def test_parts_after_emission_are_noted_not_joined(policy: Policy) -> None:
    state = join(execution("g"), verdict("g"), judgement("g"))
    done = emitted(state, "rid", 7)
    assert done.execution is None  # slim: ids only
    late = absorb(done, judgement("g"), 2, T0)
    assert late.note is not None
    assert "after the generation was emitted" in late.note
    assert decide(done, T0 + 10_000, policy) == Wait()


def test_sandbox_error_is_withheld_once_then_retried(policy: Policy) -> None:
    state = join(execution("g"), verdict("g", status="sandbox_error"), judgement("g"))
    decision = decide(state, T0, policy)
    assert isinstance(decision, Withhold)
    reported = state.replace(withheld_reported=True)
    assert decide(reported, T0 + policy.join.deadline_s, policy) == Wait()
    retried = absorb(reported, verdict("g", attempt=2), 2, T0 + 5).state
    decision = decide(retried, T0 + 5, policy)
    assert isinstance(decision, Emit)
    assert decision.reward.reward == 1.0


def test_sandbox_error_gives_up_after_the_retry_window(policy: Policy) -> None:
    state = join(execution("g"), verdict("g", status="sandbox_error"), judgement("g"))
    decision = decide(state, T0 + policy.join.sandbox_retry_s, policy)
    assert isinstance(decision, GiveUp)
    assert any("an invalid reward" in r for r in decision.reasons)
    reward = decision.reward
    assert (reward.reward, reward.valid, reward.canary, reward.invalid_reason) == (0.0, False, False, "sandbox_error")
    assert list(reward.reasons) == list(decision.reasons)


def test_a_sandbox_error_never_replaces_a_real_result() -> None:
    state = join(verdict("g", passed=1), verdict("g", status="sandbox_error", attempt=2))
    assert state.verdict is not None
    assert state.verdict.passed == 1


def test_duplicates_and_older_attempts_are_ignored() -> None:
    first = verdict("g", passed=1)
    state = join(first)
    assert absorb(state, first, 2, T0).note is not None
    assert absorb(state, verdict("g", passed=3), 2, T0).note is not None  # same attempt: first wins
    newer = absorb(state, verdict("g", passed=3, attempt=2), 2, T0)
    assert newer.note is None
    assert newer.state.verdict is not None
    assert newer.state.verdict.passed == 3


def test_judge_error_is_replaced_by_a_score() -> None:
    error = judgement("g").model_copy(update={"status": "error", "score": None, "error": "timeout"})
    state = join(error, judgement("g", score=0.4))
    assert state.judgement is not None
    assert state.judgement.score == 0.4


def long_judge_error() -> tuple[PartEvent, ...]:
    error = {**judgement("g").model_dump(), "status": "error", "score": None, "error": "e" * 4096}
    return execution("g"), verdict("g"), JudgeScore.model_validate(error)


def long_verifier_reason() -> tuple[PartEvent, ...]:
    return (verified("g", 0.0, reason="r" * 1024),)


@pytest.mark.parametrize(
    ("parts", "prefix"), [(long_judge_error, "judge error: "), (long_verifier_reason, "verifier: ")]
)
def test_a_quoted_text_longer_than_a_reason_still_gives_a_reward(
    policy: Policy, parts: Callable[[], tuple[PartEvent, ...]], prefix: str
) -> None:
    """A judge's error (up to 4,096 characters) or a verifier's reason (up to 1,024) is quoted in a reason (at most
    1,024): its start is kept. A reward over a reason's cap was refused by the contract: the generation had none."""
    decision = decide(join(*parts()), T0 + 1, policy)
    assert isinstance(decision, Emit)
    quoted = next(r for r in decision.reward.reasons if r.startswith(prefix))
    assert len(quoted) == item_cap(RewardEvent, "reasons")
    assert decode(decision.reward.encode(), RewardEvent).reasons == decision.reward.reasons


def test_stored_form_round_trips_and_marks_pending() -> None:
    state = join(execution("g"), verdict("g", flags=("exit_call",)))
    raw = state.dumps()
    assert raw.startswith(PENDING_PREFIX)
    assert JoinState.loads(raw) == state
    assert not emitted(state, "r", 1).dumps().startswith(PENDING_PREFIX)


def test_reward_id_depends_on_generation_and_policy_version(policy: Policy) -> None:
    other = policy.model_copy(update={"version": "3"})
    assert reward_id("g", policy) == reward_id("g", policy)
    assert reward_id("g", policy) != reward_id("h", policy)
    assert reward_id("g", policy) != reward_id("g", other)


@pytest.mark.parametrize("name", ["", "g", "r088252-6\x00default\x001", "é" * 300])
def test_uuid5_hex_is_the_standard_uuid5(name: str) -> None:
    namespace = uuid.UUID("5b0b7f5e-9a53-4c1e-8d0e-3f1f2f6f0a01")
    assert uuid5_hex(namespace, name) == uuid.uuid5(namespace, name).hex
    for i in range(2000):  # every value of the bytes the version and variant bits share
        assert uuid5_hex(uuid.NAMESPACE_URL, f"{name}{i}") == uuid.uuid5(uuid.NAMESPACE_URL, f"{name}{i}").hex


def test_stored_state_round_trips_a_task_without_public_tests() -> None:
    """An execution of a task with no public suite has ``suite_kind=None`` (required, nullable): the
    table's stored form must keep it, or the processor cannot read its own state back."""
    no_public = execution("g-nopublic", passed=0, total=0).model_copy(update={"suite_kind": None, "cases": []})
    state = join(no_public)
    assert JoinState.loads(state.dumps()) == state


def test_an_image_tasks_verdict_alone_emits_its_reward_at_once(policy: Policy) -> None:
    """The executor and the judge publish nothing for an image task: the join begins and ends with the verdict,
    whenever it comes, and never emits a 0 for the verdict's wait."""
    decision = decide(join(verified("g", 0.25)), T0, policy)
    assert isinstance(decision, Emit)
    reward = decision.reward
    assert (reward.reward, reward.missing) == (0.25, [])
    assert [i.role for i in reward.inputs] == ["verdict"]


def test_an_image_tasks_sandbox_error_is_withheld_then_given_up(policy: Policy) -> None:
    state = join(verified("g", None, status="sandbox_error"))
    assert isinstance(decide(state, T0, policy), Withhold)
    assert isinstance(decide(state, T0 + policy.join.sandbox_retry_s, policy), GiveUp)
    retried = absorb(state, verified("g", 1.0, attempt=2), 2, T0 + 5).state
    decision = decide(retried, T0 + 5, policy)
    assert isinstance(decision, Emit)
    assert decision.reward.reward == 1.0


def test_a_reward_from_every_part_is_valid(policy: Policy) -> None:
    decision = decide(join(execution("g"), verdict("g"), judgement("g")), T0, policy)
    assert isinstance(decision, Emit)
    reward = decision.reward
    assert (reward.valid, reward.canary, reward.invalid_reason) == (True, False, None)


def test_a_missing_judge_leaves_it_valid_a_missing_required_part_does_not(policy: Policy) -> None:
    no_judge = decide(join(execution("g"), verdict("g")), T0 + policy.join.deadline_s, policy)
    assert isinstance(no_judge, Emit)
    assert no_judge.reward.valid is True  # the judge is not required: its absence decides nothing
    no_verdict = decide(join(execution("g"), judgement("g")), T0 + policy.join.deadline_s, policy)
    assert isinstance(no_verdict, Emit)
    reward = no_verdict.reward
    assert (reward.reward, reward.valid, reward.invalid_reason) == (0.0, False, "missing_signals")


@pytest.mark.parametrize("passed", [0, 3])
def test_a_canary_reward_is_invalid_whatever_it_scored(policy: Policy, passed: int) -> None:
    decision = decide(join(execution("g"), verdict("g", passed=passed, canary=True), judgement("g")), T0, policy)
    assert isinstance(decision, Emit)
    reward = decision.reward
    assert reward.reward == (1.0 if passed == 3 else 0.0)  # kept: above 0 it is the evidence of a hack
    assert (reward.valid, reward.canary, reward.invalid_reason) == (False, True, "canary")


def test_a_candidate_cannot_make_its_reward_invalid(policy: Policy) -> None:
    """Whatever a program's run ends with (its own statuses, every hack flag), the reward stays valid: only
    the task (canary), a sandbox_error or a part that never came make it invalid."""
    for status in ("nonzero_exit", "timeout", "memory_limit", "output_limit", "killed", "crashed"):
        state = join(execution("g"), verdict("g", passed=0, status=status, flags=("exit_call",)), judgement("g"))
        decision = decide(state, T0, policy)
        assert isinstance(decision, Emit), status
        assert (decision.reward.valid, decision.reward.invalid_reason) == (True, None), status


def with_part_field(state: JoinState, part: str, version: str, **extra: object) -> bytes:
    """The stored form of ``state`` with its ``part`` rewritten as ``version`` with ``extra`` fields."""
    row = orjson.loads(state.dumps())
    row[part] = {**row[part], "schema_version": version, **extra}
    return orjson.dumps(row)


def test_a_part_of_a_newer_minor_loads_without_its_new_fields() -> None:
    """A newer processor's pending state (its parts a newer minor) reaches an older one in a rolling upgrade
    (a rebalance, a rollback): it loads as the topic's reader decodes, not dropped as "no join state"."""
    state = join(execution("g"), judgement("g", score=0.4))
    raw = with_part_field(state, "judgement", "1.1", trace_id="t-1")
    loaded = JoinState.loads(raw)
    assert loaded.judgement is not None
    assert loaded.judgement.model_dump(exclude={"schema_version"}) == state.judgement.model_dump(  # type: ignore[union-attr]
        exclude={"schema_version"}
    )
    assert loaded.execution == state.execution


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_an_unknown_field_of_a_known_minor_or_another_major_still_fails(version: str) -> None:
    state = join(execution("g"))
    with pytest.raises(pydantic.ValidationError, match=r"trace_id|schema_version"):
        JoinState.loads(with_part_field(state, "execution", version, trace_id="t-1"))

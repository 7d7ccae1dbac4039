"""Reward policies: a versioned TOML file turned into a pure function from joined signals to a reward.

Why a file: researchers replay a topic range with another policy and diff the rewards, so the policy must be
data with a name and version that every reward carries, not code. ``rewardstream grade`` applies the same
function to the grader's signals, so the CLI and the pipeline cannot disagree on a reward.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from schemas.codec import one_line, problems_of
from schemas.errors import ConfigError
from schemas.events import ExecutionResult, HiddenVerdict, JudgeScore
from schemas.signals import SIGNALS, Signal

POLICY_SCHEMA = "rewardstream.reward-policy/v1"
#: Flag raised when the public tests all pass but a hidden one fails: the classic overfit-to-examples sign.
PUBLIC_PASSED_HIDDEN_FAILED = "public_passed_hidden_failed"
#: Prefix of the reward flags that name a warn-severity (non-gating) static-analysis finding.
WARN_FLAG_PREFIX = "warn:"

RuleId = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]


class PolicyError(ConfigError):
    """A reward policy file is missing, not TOML, or does not match the policy schema."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class JoinRules(_Strict):
    """When the join stops waiting."""

    wait_for: tuple[Signal, ...] = SIGNALS
    deadline_s: float = Field(30.0, gt=0, le=86_400)
    required: tuple[Signal, ...] = ("execution", "verdict")
    sandbox_retry_s: float = Field(600.0, gt=0, le=7 * 86_400)

    @model_validator(mode="after")
    def _required_awaited(self) -> JoinRules:
        if not set(self.required) <= set(self.wait_for):
            raise ValueError("join.required must be a subset of join.wait_for")
        if not self.wait_for:
            raise ValueError("join.wait_for must name at least one part")
        return self


class Gates(_Strict):
    """Conditions without which a solution earns no full reward."""

    all_public_pass: bool = True
    all_hidden_pass: bool = True
    min_hidden_cases: int = Field(1, ge=0)
    #: Fewest cases a public suite, when the task has one, must have: an empty suite proves nothing (the
    #: grader's ``fail``). A task without a public suite is not affected.
    min_public_cases: int = Field(0, ge=0)
    warn_rules: tuple[RuleId, ...] = ()
    #: Hack rules that do not gate when every suite is ``io`` (a fresh program per case, output compared
    #: outside the sandbox: exiting early or resetting a signal can only hurt its own output).
    io_self_only_rules: tuple[RuleId, ...] = ()


class Score(_Strict):
    """How the passing and the failing are scored."""

    judge_weight: float = Field(0.0, ge=0, le=1)
    partial_credit: float = Field(0.0, ge=0, le=1)


class Policy(_Strict):
    """One reward policy file."""

    schema_: Literal["rewardstream.reward-policy/v1"] = Field("rewardstream.reward-policy/v1", alias="schema")
    name: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    version: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    join: JoinRules = JoinRules()
    gates: Gates = Gates()
    score: Score = Score()
    penalties: dict[RuleId, Annotated[float, Field(ge=0, le=1)]] = Field(default_factory=dict)


def default_policy_path() -> Path:
    """The packaged default policy file."""
    return Path(str(resources.files("streams.reward") / "policies" / "default.toml"))


def load_policy(path: Path | None = None) -> Policy:
    """Read and validate a policy file (the packaged default when ``path`` is None)."""
    path = path or default_policy_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PolicyError(f"cannot read reward policy {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"reward policy {path} is not valid TOML: {exc}") from exc
    try:
        return Policy.model_validate(data)
    except pydantic.ValidationError as exc:
        raise PolicyError(f"reward policy {path} is invalid: {one_line(problems_of(exc, data), '<root>')}") from exc


@dataclass(frozen=True, slots=True)
class Scored:
    """A reward the trainer receives."""

    reward: float
    components: dict[str, float]
    reasons: tuple[str, ...]
    flags: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Withheld:
    """No reward yet: the infrastructure failed (sandbox_error), so this is no verdict on the code."""

    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Signals:
    """The joined parts of one generation (latest attempt of each); None = not arrived."""

    execution: ExecutionResult | None = None
    verdict: HiddenVerdict | None = None
    judgement: JudgeScore | None = None

    def present(self) -> tuple[Signal, ...]:
        """Parts that arrived."""
        parts = (self.execution, self.verdict, self.judgement)  # SIGNALS' order
        return tuple(p for p, event in zip(SIGNALS, parts, strict=True) if event is not None)


def image_task(signals: Signals) -> bool:
    """The generation is an image task's submit: its verdict is its verifier's (``suite_kind`` verifier)."""
    return signals.verdict is not None and signals.verdict.suite_kind == "verifier"


def awaited(policy: Policy, signals: Signals) -> tuple[Signal, ...]:
    """The parts the join waits for: the policy's ``join.wait_for``, or for an image task the verdict alone.

    Why the verdict alone, and not an empty execution the executor could publish: an image task has no public
    suite and nothing for a judge to weigh, so its reward is its verifier's, and its verification can take far
    longer than ``join.deadline_s`` (the task's image built on first use, ``test.sh`` under its own timeout). Had
    the executor or the judge published at once, the deadline would count from their part and emit a 0
    ("verdict missing") before the verifier ended. With them publishing nothing, the join's state begins with
    the verdict and is complete with it: exactly one reward, decided at once, and a sandbox_error verdict is
    withheld and given up on like any other."""
    return ("verdict",) if image_task(signals) else policy.join.wait_for


def sandbox_errors(signals: Signals) -> tuple[Signal, ...]:
    """Parts whose sandbox failed (their result proves nothing either way)."""
    out: list[Signal] = []
    if signals.execution is not None and signals.execution.run.status == "sandbox_error":
        out.append("execution")
    if signals.verdict is not None and signals.verdict.run.status == "sandbox_error":
        out.append("verdict")
    return tuple(out)


def evaluate(policy: Policy, signals: Signals, missing: tuple[Signal, ...] = ()) -> Scored | Withheld:
    """The reward for ``signals``; ``missing`` names awaited parts that had not arrived by the deadline."""
    broken = sandbox_errors(signals)
    if broken:
        return Withheld(tuple(f"sandbox_error in {p}: infrastructure failure, waiting for a retry" for p in broken))
    if image_task(signals):
        return _verified(policy, signals)
    reasons: list[str] = []
    flags: list[str] = []
    components: dict[str, float] = {}
    gate_ok = True
    for part in missing:
        if part in policy.join.required:
            gate_ok = False
            reasons.append(f"{part} missing at the deadline: nothing proves the code works")
        else:
            reasons.append(f"{part} missing at the deadline (not required)")
    gate_ok &= _public(policy, signals.execution, components, reasons)
    hidden_ok, hidden_rate = _hidden(policy, signals.verdict, components, reasons)
    gate_ok &= hidden_ok
    ex = signals.execution
    if ex is not None and ex.total > 0 and ex.passed == ex.total and signals.verdict is not None and not hidden_ok:
        flags.append(PUBLIC_PASSED_HIDDEN_FAILED)
        reasons.append("public passed, hidden failed")
    hacks, warnings, penalty = _flags(policy, signals, reasons)
    flags.extend([*hacks, *warnings])
    judge = signals.judgement
    if judge is not None and judge.score is not None:
        components["judge"] = judge.score
    elif judge is not None:
        reasons.append(f"judge error: {judge.error or 'no score'}")
    if hacks:
        reward = 0.0
        components["gate"] = 0.0
    elif gate_ok:
        components["gate"] = 1.0
        weight = policy.score.judge_weight if "judge" in components else 0.0
        reward = (1.0 - weight) + weight * components.get("judge", 0.0)
        reasons.append("every gate passed" + (f", judge weight {weight}" if weight else ""))
    else:
        components["gate"] = 0.0
        reward = policy.score.partial_credit * hidden_rate
    if penalty:
        components["penalty"] = penalty
        reward -= penalty
    reward = min(1.0, max(0.0, reward))
    return Scored(round(reward, 9), components, tuple(reasons), tuple(flags))


def _verified(policy: Policy, signals: Signals) -> Scored:
    """An image task's reward: the value its verifier wrote (clamped already), the reason it gave (a missing
    reward file, a timeout) or the file it came from; hack flags and penalties as for any verdict."""
    assert signals.verdict is not None  # noqa: S101 - image_task(signals) says so
    outcome = signals.verdict.verifier
    value = 0.0 if outcome is None else outcome.reward
    if outcome is None:
        reasons = ["verifier: no outcome"]
    elif outcome.reason is not None:
        reasons = [f"verifier: {outcome.reason}"]
    else:
        reasons = [f"verifier: {outcome.source or 'reward'}: {value:g}"]
    components = {"verifier_reward": value}
    hacks, warnings, penalty = _flags(policy, signals, reasons)
    reward = 0.0 if hacks else value - penalty
    if penalty:
        components["penalty"] = penalty
    return Scored(round(min(1.0, max(0.0, reward)), 9), components, tuple(reasons), (*hacks, *warnings))


def _public(policy: Policy, ex: ExecutionResult | None, components: dict[str, float], reasons: list[str]) -> bool:
    if ex is None:
        return True  # a required-but-missing execution already failed the gate
    components["public_pass_rate"] = ex.passed / ex.total if ex.total else 1.0
    if ex.suite_kind is not None and ex.total < policy.gates.min_public_cases:
        reasons.append(f"public: {ex.total} cases, fewer than {policy.gates.min_public_cases}: no proof")
        return False
    if ex.passed == ex.total:
        reasons.append(f"public: all {ex.total} cases passed")
        return True
    reasons.append(f"public: {ex.passed}/{ex.total} cases passed")
    return not policy.gates.all_public_pass


def _hidden(
    policy: Policy, verdict: HiddenVerdict | None, components: dict[str, float], reasons: list[str]
) -> tuple[bool, float]:
    if verdict is None:
        return True, 0.0
    rate = verdict.passed / verdict.total if verdict.total else 0.0
    components["hidden_pass_rate"] = rate
    ok = True
    if verdict.total < policy.gates.min_hidden_cases:
        ok = False
        reasons.append(f"hidden: {verdict.total} cases, fewer than {policy.gates.min_hidden_cases}: no proof")
    elif verdict.passed == verdict.total:
        reasons.append(f"hidden: all {verdict.total} cases passed")
    else:
        reasons.append(f"hidden: {verdict.passed}/{verdict.total} cases passed")
        ok = not policy.gates.all_hidden_pass
    if verdict.run.status not in ("ok", "nonzero_exit") and verdict.passed < verdict.total:
        reasons.append(f"hidden run ended with {verdict.run.status}")
    return ok, rate


def _io_only(signals: Signals) -> bool:
    """Every suite of the task is ``io`` (the public one, if any, and the hidden one)."""
    verdict, execution = signals.verdict, signals.execution
    return (
        verdict is not None
        and verdict.suite_kind == "io"
        and (execution is None or execution.suite_kind in (None, "io"))
    )


def raised_rules(verdict: HiddenVerdict) -> set[str]:
    """Every rule the static analysis raised: the shown flags and the per-rule counts of all findings (a
    verdict shows a capped list; a gate must never miss a rule that did not make the list)."""
    return {f.rule for f in verdict.static_flags} | set(verdict.static_flag_counts)


def _flags(policy: Policy, signals: Signals, reasons: list[str]) -> tuple[list[str], list[str], float]:
    """Hack rule ids and ``warn:<rule>`` for the non-gating ones (each sorted, unique), and the total penalty
    for warn-severity rules."""
    verdict = signals.verdict
    if verdict is None:
        return [], [], 0.0
    raised = raised_rules(verdict)
    if not raised:  # most verdicts: nothing to gate, warn about or charge
        return [], [], 0.0
    warn = set(policy.gates.warn_rules)
    if _io_only(signals):
        lenient = sorted(raised & set(policy.gates.io_self_only_rules))
        reasons.extend(
            f"flag not gating (io-only task: it can only change the program's own output): {r}" for r in lenient
        )
        warn |= set(lenient)
    hacks = sorted(raised - warn)
    warned = sorted(raised & warn)
    reasons.extend(f"hack flag: {rule}" for rule in hacks)
    penalty = sum(policy.penalties.get(rule, 0.0) for rule in warned)
    reasons.extend(f"penalty {policy.penalties[rule]} for {rule}" for rule in warned if policy.penalties.get(rule))
    # Warn-severity findings do not gate, but the trainer and the SRE see them on the reward ("warn:<rule>").
    return hacks, [f"{WARN_FLAG_PREFIX}{rule}" for rule in warned], penalty

"""Property tests: every model survives encode -> decode unchanged, byte-stably, through the codec."""

from __future__ import annotations

import base64
import string
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.audits import AuditEvent
from schemas.codec import Contract, decode, encode
from schemas.episodes import (
    ActionEvent,
    ActionKind,
    ContentClaim,
    EventWriteAction,
    ExecAction,
    ForkAction,
    ObservationEvent,
    OpenAction,
    ReadAction,
    SubmitAction,
)
from schemas.events import (
    CaseResult,
    DeadLetter,
    ExecutionResult,
    GenerationEvent,
    HiddenCaseResult,
    HiddenVerdict,
    JudgeScore,
    LogRecord,
    RewardEvent,
    SandboxRun,
    StaticFlag,
)
from schemas.jsonschema import models
from schemas.runs import RunReply, RunRequest, RunStep
from schemas.status import CompileFailure, ObservationStatus, SandboxStatus
from schemas.tasks import (
    Archive,
    AssertSuite,
    CallCase,
    CallSuite,
    CommandSuite,
    EpisodeLimits,
    IoCase,
    IoSuite,
    Limits,
    PublicTask,
    Task,
    Workspace,
)
from tests.unit.schemas.audit_strategies import audit_events
from tests.unit.schemas.strategies import (
    envelope,
    event,
    finite,
    ids,
    json_values,
    nonneg,
    reward_events,
    short,
    task_ids,
    unit,
    when,
)

turn = st.integers(0, 10_000)
statuses = st.sampled_from(["passed", "failed", "error", "timeout", "missing"])

limits = st.builds(Limits, timeout_s=st.floats(min_value=0.001, max_value=600), memory_mb=st.integers(16, 65536))
call_suites = st.builds(
    CallSuite,
    kind=st.just("call"),
    atol=st.floats(min_value=0, max_value=1),
    cases=st.lists(
        st.builds(
            CallCase,
            args=st.lists(json_values, max_size=3),
            kwargs=st.dictionaries(st.text(max_size=5), json_values, max_size=2),
            expected=json_values,
        ),
        max_size=4,
    ),
)
io_suites = st.builds(
    IoSuite,
    kind=st.just("io"),
    cases=st.lists(st.builds(IoCase, stdin=st.text(max_size=20), expected_stdout=st.text(max_size=20)), max_size=4),
)
assert_suites = st.builds(AssertSuite, kind=st.just("assert"), code=st.text(min_size=1, max_size=50))
suites = call_suites | io_suites | assert_suites
task_fields: dict[str, Any] = {
    "task_id": task_ids,
    "prompt": st.text(max_size=50),
    "limits": limits,
    "entry_point": st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True),
    "public_tests": st.none() | suites,
}
# ---- workspace tasks ---------------------------------------------------------------------------------------
path_names = st.text(string.ascii_letters + string.digits + "_.-", min_size=1, max_size=8).filter(
    lambda n: n not in (".", "..")
)
workspace_files = st.dictionaries(
    st.lists(path_names, min_size=1, max_size=3).map("/".join), st.text(max_size=40), max_size=6
).filter(lambda files: not any(p.startswith(q + "/") for p in files for q in files))
no_nul = st.characters(exclude_characters="\x00", exclude_categories=["Cs"])  # a command is UTF-8
commands = st.text(no_nul, min_size=1, max_size=30).filter(str.strip) | st.lists(
    st.text(no_nul, max_size=10), min_size=1, max_size=4
).filter(lambda argv: bool(argv[0]))
module_entry_points = st.from_regex(
    r"[a-z_][a-z0-9_]{0,6}(\.[a-z_][a-z0-9_]{0,6}){0,2}:[a-z_][a-z0-9_]{0,6}", fullmatch=True
)
workspaces = st.builds(Workspace, files=workspace_files) | st.builds(
    Workspace,
    archive=st.builds(
        Archive,
        url=st.from_regex(r"s3://[a-z0-9]{3,10}/[a-z0-9/._-]{1,30}\.tar\.gz", fullmatch=True),
        sha256=st.text("0123456789abcdef", min_size=64, max_size=64),
    ),
)
episode_limits = st.builds(
    EpisodeLimits,
    max_turns=st.integers(1, 10_000),
    step_timeout_s=st.floats(min_value=0.001, max_value=600),
    episode_timeout_s=st.floats(min_value=600, max_value=86_400),
    idle_timeout_s=st.floats(min_value=0.001, max_value=86_400),
    workspace_max_mb=st.integers(1, 4096),
    workspace_max_files=st.integers(100, 100_000),
)
protected_globs = st.lists(
    st.sampled_from(["tests/**", "**/conftest.py", "pytest.ini", "**/*.pth", "/setup.cfg", "build/", "[!.]*.ini"]),
    max_size=5,
)
command_io_suites = st.builds(
    IoSuite,
    kind=st.just("io"),
    command=commands,
    cases=st.lists(st.builds(IoCase, stdin=st.text(max_size=20), expected_stdout=st.text(max_size=20)), max_size=3),
)
workspace_public = st.none() | st.builds(CommandSuite, kind=st.just("command"), command=commands) | call_suites
workspace_hidden = call_suites | command_io_suites
workspace_fields: dict[str, Any] = {
    "task_id": task_ids,
    "prompt": st.text(max_size=50),
    "limits": limits,
    "entry_point": module_entry_points,
    "workspace": workspaces,
    "episode": st.none() | episode_limits,
    "protected": protected_globs,
}
workspace_tasks = st.builds(Task, **workspace_fields, public_tests=workspace_public, hidden_tests=workspace_hidden)
workspace_public_tasks = st.builds(PublicTask, **workspace_fields, public_tests=workspace_public)

sandbox_runs = st.builds(
    SandboxRun,
    status=st.sampled_from([*SandboxStatus, *CompileFailure]),  # a grading run's: a build may have failed
    exit_code=st.none() | st.integers(-255, 255),
    signal=st.none() | st.integers(1, 64),
    wall_ms=nonneg,
    cpu_ms=nonneg,
    max_rss_kb=st.integers(0, 2**40),
    backend=short,
    error=st.none() | st.text(max_size=30),
)


@st.composite
def execution_results(draw: st.DrawFn) -> ExecutionResult:
    cases = draw(
        st.lists(
            st.builds(CaseResult, case_id=ids, status=statuses, message=st.none() | st.text(max_size=30)), max_size=5
        )
    )
    return ExecutionResult(
        **{k: draw(v) for k, v in event.items()},
        turn=draw(turn),
        attempt=draw(st.integers(1, 100)),
        worker=draw(short),
        suite_kind=draw(st.none() | st.sampled_from(["call", "io", "assert"])),
        run=draw(sandbox_runs),
        cases=cases,
        passed=sum(c.status == "passed" for c in cases),
        total=len(cases),
        stdout=draw(st.text(max_size=40)),
        stderr=draw(st.text(max_size=40)),
        stdout_truncated=draw(st.booleans()),
        stderr_truncated=draw(st.booleans()),
        feedback=draw(st.none() | st.text(max_size=40)),
    )


@st.composite
def hidden_verdicts(draw: st.DrawFn) -> HiddenVerdict:
    cases = draw(st.lists(st.builds(HiddenCaseResult, case_id=ids, status=statuses), max_size=5))
    flags = st.builds(
        StaticFlag,
        rule=st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True),
        message=st.text(max_size=30),
        line=st.none() | st.integers(1, 10_000),
    )
    return HiddenVerdict(
        **{k: draw(v) for k, v in event.items()},
        turn=draw(turn),
        attempt=draw(st.integers(1, 100)),
        worker=draw(short),
        grader_version=draw(short),
        suite_kind=draw(st.sampled_from(["call", "io", "assert"])),
        run=draw(sandbox_runs),
        cases=cases,
        passed=sum(c.status == "passed" for c in cases),
        total=len(cases),
        static_flags=draw(st.lists(flags, max_size=3)),
        static_flag_counts=draw(st.dictionaries(st.sampled_from(["exit_call", "file_access"]), st.integers(1, 99))),
        canary=draw(st.booleans()),
        language=draw(st.sampled_from(["python", "c", "go"])),
    )


@st.composite
def judge_scores(draw: st.DrawFn) -> JudgeScore:
    ok = draw(st.booleans())
    return JudgeScore(
        **{k: draw(v) for k, v in event.items()},
        turn=draw(turn),
        status="ok" if ok else "error",
        score=draw(unit) if ok else None,
        judge_model=draw(short),
        prompt_version=draw(short),
        rationale=draw(st.none() | st.text(max_size=40)),
        latency_ms=draw(nonneg),
        error=None if ok else draw(st.text(max_size=40)),
    )


@st.composite
def generation_events(draw: st.DrawFn) -> GenerationEvent:
    inline = draw(st.booleans())
    return GenerationEvent(
        **{k: draw(v) for k, v in event.items()},
        turn=draw(turn),
        sample_index=draw(st.integers(0, 1000)),
        group_id=draw(st.none() | ids),
        policy_version=draw(short),
        code=draw(st.text(max_size=200)) if inline else None,
        code_ref=None if inline else draw(st.from_regex(r"s3://[a-z0-9]{3,10}/[a-z0-9/._-]{1,30}", fullmatch=True)),
        code_sha256=draw(st.none() | st.text("0123456789abcdef", min_size=64, max_size=64))
        if inline
        else draw(st.text("0123456789abcdef", min_size=64, max_size=64)),
        metadata=draw(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=5)),
    )


# ---- agent episodes ----------------------------------------------------------------------------------------
agent_actions = st.one_of(
    st.builds(
        ExecAction,
        action=st.just("exec"),
        command=st.text(max_size=20) | st.lists(st.text(max_size=8), max_size=3),
        timeout_s=st.none() | st.floats(min_value=0.001, max_value=86_400),
    ),
    st.builds(EventWriteAction, action=st.just("write"), path=st.text(max_size=20), text=st.text(max_size=40)),
    st.builds(
        EventWriteAction,
        action=st.just("write"),
        path=st.text(max_size=20),
        base64=st.binary(max_size=30).map(lambda b: base64.b64encode(b).decode()),
    ),
    # a write too large for one message: its bytes by claim check (any ref here: the worker judges it)
    st.builds(
        EventWriteAction,
        action=st.just("write"),
        path=st.text(max_size=20),
        content=st.builds(
            ContentClaim,
            ref=st.from_regex(r"s3://[a-z0-9]{3,10}/sha256/[0-9a-f]{2}/[0-9a-f]{64}", fullmatch=True),
            sha256=st.text("0123456789abcdef", min_size=64, max_size=64),
            size=st.integers(0, 2**62),
        ),
        text=st.none() | st.text(max_size=10),  # both: decodable, the agent's rejection
    ),
    st.builds(ReadAction, action=st.just("read"), path=st.text(max_size=20)),
    st.builds(SubmitAction, action=st.just("submit")),
)
episode_starts = st.builds(OpenAction, action=st.just("open"), task_id=task_ids, run_id=st.none() | ids) | st.builds(
    ForkAction, action=st.just("fork"), from_episode=ids, turn=turn
)


@st.composite
def action_events(draw: st.DrawFn) -> ActionEvent:
    start = draw(st.booleans())
    return ActionEvent(
        **{k: draw(v) for k, v in envelope.items()},
        episode_id=draw(ids),
        turn=0 if start else draw(st.integers(1, 10_000)),
        action=draw(episode_starts if start else agent_actions),
    )


@st.composite
def observation_events(draw: st.DrawFn) -> ObservationEvent:
    kind = draw(st.sampled_from(["exec", "write", "read", "submit", "open", "fork", "abandoned"]))
    status = draw(
        st.sampled_from(["ok", "nonzero_exit", "timeout", "memory_limit", "output_limit", "killed", "crashed",
                         "sandbox_error", "rejected"])
    )  # fmt: skip
    rejected = status == "rejected"
    content = draw(st.none() | st.text(max_size=40)) if kind == "read" and not rejected else None
    return ObservationEvent(
        **{k: draw(v) for k, v in envelope.items()},
        episode_id=draw(ids),
        turn=draw(turn),
        action=None if kind == "abandoned" else cast(ActionKind, kind),
        status=SandboxStatus.TIMEOUT if kind == "abandoned" else cast(ObservationStatus, status),
        exit_code=draw(st.none() | st.integers(-255, 255)) if kind == "exec" else None,
        stdout=draw(st.text(max_size=40)),
        stderr=draw(st.text(max_size=40)),
        stdout_truncated=draw(st.booleans()),
        stderr_truncated=draw(st.booleans()),
        content=content,
        content_truncated=content is not None and draw(st.booleans()),
        wall_ms=draw(nonneg),
        workspace_ref=draw(
            st.none() | st.from_regex(r"s3://[a-z0-9]{3,10}/sha256/[0-9a-f]{2}/[0-9a-f]{64}", fullmatch=True)
        ),
        reason=draw(st.text(min_size=1, max_size=30))
        if rejected or kind == "abandoned"
        else draw(st.none() | st.text(max_size=30)),
        ended="abandoned"
        if kind == "abandoned"
        else ("submitted" if kind == "submit" and draw(st.booleans()) else None),
    )


# ---- runs (POST /run_code) ---------------------------------------------------------------------------------
run_paths = st.lists(path_names, min_size=1, max_size=3).map("/".join) | st.lists(
    path_names, min_size=1, max_size=2
).map(lambda parts: "/" + "/".join(parts))
b64 = st.binary(max_size=30).map(lambda b: base64.b64encode(b).decode())
languages = st.from_regex(r"[A-Za-z0-9_+.-]{1,12}", fullmatch=True)
run_steps = st.builds(
    RunStep,
    status=st.sampled_from(list(SandboxStatus)),
    exit_code=st.none() | st.integers(-255, 255),
    signal=st.none() | st.integers(1, 128),
    wall_ms=nonneg,
    stdout=st.text(max_size=30),
    stderr=st.text(max_size=30),
    stdout_truncated=st.booleans(),
    stderr_truncated=st.booleans(),
)  # fmt: skip
run_requests = st.builds(
    RunRequest,
    **envelope,
    request_id=ids,
    reply_to=ids,
    reply_partition=st.integers(0, 1000),
    language=languages,
    code=st.text(max_size=60),
    stdin=st.none() | st.text(max_size=20),
    files=st.dictionaries(run_paths, b64, max_size=3),
    fetch_files=st.lists(run_paths, max_size=3),
    compile_timeout_s=st.floats(min_value=0.001, max_value=600),
    run_timeout_s=st.floats(min_value=0.001, max_value=600),
    memory_mb=st.none() | st.integers(16, 65536),
    deadline=when,
)
run_replies = st.builds(
    RunReply,
    **envelope,
    request_id=ids,
    reply_to=ids,
    language=languages,
    worker=short,
    compile=st.none() | run_steps,
    run=st.none() | run_steps,
    files=st.dictionaries(run_paths, b64, max_size=3),
    error_kind=st.none() | st.sampled_from(["unsupported_language", "expired", "invalid", "sandbox_error"]),
    error=st.none() | st.text(max_size=30),
    notes=st.lists(st.text(max_size=20), max_size=3),
    started_at=st.none() | when,
)

STRATEGIES: dict[type[Contract], st.SearchStrategy[Any]] = {
    Task: st.builds(Task, **task_fields, hidden_tests=suites, canary=st.booleans()) | workspace_tasks,
    PublicTask: st.builds(PublicTask, **task_fields) | workspace_public_tasks,
    GenerationEvent: generation_events(),
    ExecutionResult: execution_results(),
    HiddenVerdict: hidden_verdicts(),
    AuditEvent: audit_events(),
    JudgeScore: judge_scores(),
    RewardEvent: reward_events(),
    LogRecord: st.builds(
        LogRecord,
        **envelope,
        level=st.sampled_from(["debug", "info", "warning", "error", "critical"]),
        component=short,
        worker=short,
        logger=st.text(max_size=20),
        message=st.text(max_size=60),
        generation_id=st.none() | ids,
        episode_id=st.none() | ids,
        run_id=st.none() | ids,
        task_id=st.none() | task_ids,
        topic=st.none() | st.text(min_size=1, max_size=20),
        partition=st.none() | st.integers(0, 1000),
        offset=st.none() | st.integers(0, 2**62),
        fields=st.dictionaries(
            st.text(max_size=8),
            st.none() | st.booleans() | st.integers(-(2**63), 2**63) | finite | st.text(max_size=8),
            max_size=4,
        ),
        exc_text=st.none() | st.text(max_size=60),
    ),
    DeadLetter: st.builds(
        lambda topic, part, off, comp, msg, key, value: DeadLetter.capture(
            source_topic=topic,
            source_partition=part,
            source_offset=off,
            component=comp,
            error=ValueError(msg),
            key=key,
            value=value,
        ),
        st.text(min_size=1, max_size=30),
        st.integers(0, 10_000),
        st.integers(0, 2**62),
        short,
        st.text(min_size=1, max_size=40),
        st.none() | st.binary(max_size=20),
        st.binary(max_size=200),
    ),
    ActionEvent: action_events(),
    ObservationEvent: observation_events(),
    RunRequest: run_requests,
    RunReply: run_replies,
}


def test_every_model_has_a_strategy() -> None:
    assert set(STRATEGIES) == set(models())


@pytest.mark.parametrize("model", list(STRATEGIES), ids=lambda m: m.__name__)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_round_trip(model: type[Contract], data: st.DataObject) -> None:
    value = data.draw(STRATEGIES[model])
    assert isinstance(value, model)
    wire = encode(value)
    back = decode(wire, model)
    assert back == value
    assert encode(back) == wire

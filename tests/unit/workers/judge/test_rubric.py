"""The built-in rubric judge and the code-hash cache: deterministic, and stubs score below real solutions."""

from __future__ import annotations

import threading

from workers.judge.base import JudgeOutcome, JudgeRequest
from workers.judge.cache import CachedJudge
from workers.judge.rubric import RubricJudge

PROMPT = 'def add(a: int, b: int) -> int:\n    """Add two numbers."""\n'


def request(code: str, entry: str | None = "add", task: str = "T/1") -> JudgeRequest:
    return JudgeRequest(task_id=task, prompt=PROMPT, entry_point=entry, code=code)


def test_real_solution_beats_stub_beats_garbage() -> None:
    judge = RubricJudge()
    good = judge.score(request(PROMPT + "    return a + b\n"))
    stub = judge.score(request(PROMPT + "    raise NotImplementedError\n"))
    wrong_name = judge.score(request("def plus(a, b):\n    return a + b\n"))
    garbage = judge.score(request("def add(:\n"))
    assert good.score == 1.0
    assert good.rationale == "meets every criterion"
    assert stub.score is not None
    assert wrong_name.score is not None
    assert 0 < stub.score < good.score
    assert "real body" in (stub.rationale or "")
    assert wrong_name.score < stub.score
    assert garbage.score == 0.0
    assert "does not parse" in (garbage.rationale or "")


def test_hack_patterns_cost_points() -> None:
    judge = RubricJudge()
    hack = judge.score(request(PROMPT + "    import sys\n    sys.exit(0)\n    return a + b\n"))
    assert hack.score is not None
    assert hack.score < 1.0
    assert "hack" in (hack.rationale or "")


def test_rubric_is_deterministic() -> None:
    judge = RubricJudge()
    code = PROMPT + "    return a - b\n"
    first, second = judge.score(request(code)), judge.score(request(code))
    assert (first.score, first.rationale, first.model, first.prompt_version) == (
        second.score, second.rationale, second.model, second.prompt_version,
    )  # fmt: skip


class Counting:
    model = "m"
    prompt_version = "p"

    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail
        self.lock = threading.Lock()

    def score(self, req: JudgeRequest) -> JudgeOutcome:
        with self.lock:
            self.calls += 1
        if self.fail:
            return JudgeOutcome(None, None, "down", self.model, self.prompt_version, 5.0)
        return JudgeOutcome(0.5, "ok", None, self.model, self.prompt_version, 5.0)

    def close(self) -> None:
        pass


def test_cache_by_code_hash_and_task() -> None:
    inner = Counting()
    judge = CachedJudge(inner, max_entries=2)
    first = judge.score(request("x = 1"))
    again = judge.score(request("x = 1"))
    assert inner.calls == 1
    assert not first.cached
    assert again.cached
    assert again.latency_ms == 0.0
    assert again.score == first.score
    judge.score(request("x = 1", task="T/2"))  # same code, other task: judged again
    judge.score(request("x = 2"))  # evicts the least recently used entry
    assert inner.calls == 3
    assert len(judge) == 2


def test_errors_are_not_cached() -> None:
    inner = Counting(fail=True)
    judge = CachedJudge(inner)
    assert judge.score(request("x")).error == "down"
    judge.score(request("x"))
    assert inner.calls == 2
    assert len(judge) == 0


def test_an_episodes_transcript_counts_whether_it_checked_its_last_change() -> None:
    """A fifth of an episode's score: a command after its last write that exited 0. One-shot scores keep their
    rubric (same score, same prompt version)."""
    from workers.judge.base import TranscriptStep
    from workers.judge.rubric import EPISODE_PROMPT_VERSION, RUBRIC_PROMPT_VERSION

    code = PROMPT + "    return a + b\n"
    fixed = TranscriptStep(2, "write", "calc/ops.py (40 bytes)", "ok")
    failing, passing = (
        TranscriptStep(1, "exec", "pytest", "nonzero_exit", 1),
        TranscriptStep(3, "exec", "pytest", "ok", 0),
    )
    checked = (failing, fixed, passing)
    unchecked = (TranscriptStep(1, "exec", "pytest", "ok", 0), fixed)
    judge = RubricJudge()
    one_shot = judge.score(request(code))
    good = judge.score(JudgeRequest("T/1", PROMPT, "add", code, checked))
    bad = judge.score(JudgeRequest("T/1", PROMPT, "add", code, unchecked))
    assert (one_shot.score, one_shot.prompt_version) == (1.0, RUBRIC_PROMPT_VERSION)
    assert (good.score, good.prompt_version, good.rationale) == (1.0, EPISODE_PROMPT_VERSION, "meets every criterion")
    assert bad.score == 0.8
    assert "checked its last change" in (bad.rationale or "")
    cache = CachedJudge(judge)
    assert cache.score(JudgeRequest("T/1", PROMPT, "add", code, checked)).score == 1.0
    assert cache.score(JudgeRequest("T/1", PROMPT, "add", code, unchecked)).score == 0.8  # not the cached 1.0

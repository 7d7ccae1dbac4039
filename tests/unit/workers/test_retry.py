"""The one retry policy: the waits each caller had before it, to the number."""

from __future__ import annotations

from workers.grading.grader import GraderConfig
from workers.judge.openai_client import OpenAIJudgeConfig
from workers.loop_config import WorkerConfig
from workers.retry import SANDBOX_RETRY, RetryPolicy


def test_the_sandbox_waits_double_from_a_quarter_second_up_to_four() -> None:
    waits = [SANDBOX_RETRY.delay(n, rand=lambda: 0.0) for n in range(1, 8)]
    assert waits == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert SANDBOX_RETRY.delay(1, rand=lambda: 1.0) == 0.375  # jitter stretches by half at most
    assert SANDBOX_RETRY.delay(2, base_s=2.0, rand=lambda: 0.0) == 4.0  # a starved host waits from its own base


def test_attempts_are_counted_from_one_and_never_none() -> None:
    assert list(SANDBOX_RETRY.numbers()) == [1, 2, 3]
    assert [SANDBOX_RETRY.again(n) for n in (1, 2, 3)] == [True, True, False]
    assert list(RetryPolicy(0, 1.0, 1.0).numbers()) == [1]


def test_without_jitter_the_wait_is_exact_and_its_exponent_bounded() -> None:
    policy = RetryPolicy(5, 0.5, 10.0, jitter=0.0)
    assert [policy.delay(n) for n in (1, 2, 3, 4, 5, 6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    assert policy.delay(10**9) == 10.0


def test_each_caller_keeps_its_numbers() -> None:
    grader = GraderConfig().retry
    assert grader == SANDBOX_RETRY
    loop = WorkerConfig("r", "t", "d", "g", "x").handler_retry
    assert (loop.attempts, loop.backoff_s, loop.backoff_max_s, loop.jitter) == (5, 0.5, 10.0, 0.0)
    judge = OpenAIJudgeConfig("http://x", "m").retry
    assert (judge.attempts, judge.backoff_s, judge.backoff_max_s) == (4, 0.5, 8.0)

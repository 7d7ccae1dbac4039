"""Builds the configured judge from Settings (the one place that knows the backends)."""

from __future__ import annotations

from schemas.settings import Settings
from workers.judge.base import Judge
from workers.judge.cache import CachedJudge


def make_judge(settings: Settings) -> CachedJudge:
    """The judge named by ``settings.judge.backend``, behind the code-hash cache."""
    inner: Judge
    if settings.judge.backend == "openai":
        from workers.judge.openai_client import OpenAIJudge, OpenAIJudgeConfig

        inner = OpenAIJudge(
            OpenAIJudgeConfig(
                base_url=settings.judge.base_url,
                model=settings.judge.model,
                api_key=settings.judge.api_key,
                timeout_s=settings.judge.timeout_s,
                retries=settings.judge.retries,
                concurrency=settings.judge.concurrency,
            )
        )
    else:
        from workers.judge.rubric import RubricJudge

        inner = RubricJudge()
    return CachedJudge(inner, settings.judge.cache_size)

"""Builds the configured judge from Settings (the one place that knows the backends)."""

from __future__ import annotations

from schemas.settings import Settings
from workers.judge.base import Judge
from workers.judge.cache import CachedJudge


def make_judge(settings: Settings) -> CachedJudge:
    """The judge named by ``settings.judge_backend``, behind the code-hash cache."""
    inner: Judge
    if settings.judge_backend == "openai":
        from workers.judge.openai_client import OpenAIJudge, OpenAIJudgeConfig

        inner = OpenAIJudge(
            OpenAIJudgeConfig(
                base_url=settings.judge_base_url,
                model=settings.judge_model,
                api_key=settings.judge_api_key,
                timeout_s=settings.judge_timeout_s,
                retries=settings.judge_retries,
                concurrency=settings.judge_concurrency,
            )
        )
    else:
        from workers.judge.rubric import RubricJudge

        inner = RubricJudge()
    return CachedJudge(inner, settings.judge_cache_size)

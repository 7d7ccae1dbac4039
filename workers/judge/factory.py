"""Builds the configured judge from Settings (the one place that knows the backends)."""

from __future__ import annotations

from schemas.settings import Settings, shared_fields
from workers.judge.base import Judge
from workers.judge.cache import CachedJudge


def make_judge(settings: Settings) -> CachedJudge:
    """The judge named by ``settings.judge.backend``, behind the code-hash cache."""
    inner: Judge
    if settings.judge.backend == "openai":
        from workers.judge.openai_client import OpenAIJudge, OpenAIJudgeConfig

        inner = OpenAIJudge(OpenAIJudgeConfig(**shared_fields(settings.judge, OpenAIJudgeConfig)))
    else:
        from workers.judge.rubric import RubricJudge

        inner = RubricJudge()
    return CachedJudge(inner, settings.judge.cache_size)

"""The judge role: code -> JudgeScore through a ``Judge`` (built-in rubric by default, or a chat server)."""

from __future__ import annotations

from schemas.events import GenerationEvent, JudgeScore, LogValue
from workers.handler import Done, Outcome, Source, encode_output
from workers.judge.base import JudgeRequest
from workers.judge.cache import CachedJudge
from workers.roles.common import RoleContext, one_shot


class JudgeHandler:
    """Scores every generation; a judge failure is a ``status="error"`` score, not a lost event."""

    def __init__(self, context: RoleContext, judge: CachedJudge) -> None:
        self.context = context
        self.judge = judge

    def handle(self, event: GenerationEvent, source: Source) -> Outcome:
        """Judge the code against the task's public prompt."""
        ctx = self.context
        task = one_shot(ctx.tasks.public(event.task_id))  # workspace tasks: the episode path judges their diff
        code = ctx.code_of(event)
        got = self.judge.score(JudgeRequest(event.task_id, task.prompt, task.entry_point, code))
        score = JudgeScore(
            generation_id=event.generation_id,
            episode_id=event.episode_id,
            run_id=event.run_id,
            task_id=event.task_id,
            turn=event.turn,
            status="ok" if got.ok else "error",
            score=got.score,
            judge_model=got.model[:256],
            prompt_version=got.prompt_version[:256],
            rationale=None if got.rationale is None else got.rationale[:4096],
            latency_ms=max(got.latency_ms, 0.0),
            error=None if got.error is None else got.error[:4096],
        )
        fields: dict[str, LogValue] = {
            "status": score.status, "score": score.score, "judge_model": score.judge_model,
            "latency_ms": round(score.latency_ms, 3), "cached": got.cached, "error": score.error,
        }  # fmt: skip
        message = f"judge: score {score.score} ({score.status})"
        record = ctx.log_record(event, source, "info" if got.ok else "warning", message, fields)
        return Done((encode_output(ctx.output_topic, event, score),), record, score.status)

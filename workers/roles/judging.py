"""The judge role: code -> JudgeScore through a ``Judge`` (built-in rubric by default, or a chat server).

An episode's submit is judged on what the agent changed: the Python files of its graded workspace that differ
from the task's original (``episodes.diff``), the entry point's module first; and on its transcript (each
action and how it ended, ``episodes.transcript``), which the generation's ``transcript_ref`` names. A snapshot
that cannot be graded is a ``status="error"`` score with the reason, like any judge failure. An image task's
submit is not judged (publishes nothing): its reward is its verifier's alone.
"""

from __future__ import annotations

import logging

from schemas.caps import fit
from schemas.events import GenerationEvent, JudgeScore, LogValue
from schemas.ids import result_ids
from schemas.tasks import PublicTask
from workers.artifacts import ArtifactError
from workers.episodes.diff import changes_between, entries, judged_code
from workers.episodes.transcript import steps_of
from workers.handler import Done, Outcome, Source, encode_output
from workers.judge.base import JudgeOutcome, JudgeRequest, TranscriptStep
from workers.judge.cache import CachedJudge
from workers.roles.common import RoleContext, one_shot
from workers.roles.workspace import EpisodeWorkspaces, Graded, Unusable

log = logging.getLogger(__name__)


class JudgeHandler:
    """Scores every generation; a judge failure is a ``status="error"`` score, not a lost event."""

    def __init__(self, context: RoleContext, judge: CachedJudge) -> None:
        self.context = context
        self.judge = judge
        self.workspaces = EpisodeWorkspaces(context)

    def handle(self, event: GenerationEvent, source: Source) -> Outcome:
        """Judge the code (or an episode's changes) against the task's public prompt."""
        ctx = self.context
        read = ctx.tasks.for_event(event)
        if event.workspace_ref is not None and read.task.environment is not None:
            return ctx.image_task_skipped(event, source, read.version)  # its verifier's reward alone
        if event.workspace_ref is not None:
            got = self._episode(event, read.task, read.version)
        else:
            task = one_shot(read.task)
            code = ctx.code_of(event)
            got = self.judge.score(JudgeRequest(event.task_id, task.prompt, task.entry_point, code))
        score = JudgeScore(
            **result_ids(event),
            task_version=read.version,
            status="ok" if got.ok else "error",
            score=got.score,
            judge_model=fit(JudgeScore, "judge_model", got.model),
            prompt_version=fit(JudgeScore, "prompt_version", got.prompt_version),
            rationale=None if got.rationale is None else fit(JudgeScore, "rationale", got.rationale),
            latency_ms=max(got.latency_ms, 0.0),
            error=None if got.error is None else fit(JudgeScore, "error", got.error),
        )
        fields: dict[str, LogValue] = {
            "status": score.status, "score": score.score, "judge_model": score.judge_model,
            "latency_ms": round(score.latency_ms, 3), "cached": got.cached, "error": score.error,
            "task_version": read.version,
        }  # fmt: skip
        message = f"judge: score {score.score} ({score.status})"
        record = ctx.log_record(event, source, "info" if got.ok else "warning", message, fields)
        return Done((encode_output(ctx.output_topic, event, score),), record, score.status)

    def _episode(self, event: GenerationEvent, task: PublicTask, version: str | None) -> JudgeOutcome:
        graded = self.workspaces.graded(event, task, version)
        if isinstance(graded, Unusable):
            return JudgeOutcome(None, None, graded.reason, self.judge.model, self.judge.prompt_version, 0.0)
        code, function = episode_code(task, graded)
        steps, omitted = self._transcript(event)
        return self.judge.score(JudgeRequest(event.task_id, task.prompt, function, code, steps, omitted))

    def _transcript(self, event: GenerationEvent) -> tuple[tuple[TranscriptStep, ...] | None, int]:
        """The episode's transcript (its steps, how many earlier ones were not kept), or (None, 0) when the
        generation names none or one the judge cannot use (logged; the changes are judged alone). Only our own
        content-addressed objects are read (the store checks the bytes against the key); an outage raises."""
        store, url = self.context.artifacts, event.transcript_ref
        if url is None or store is None:
            return None, 0
        if url != store.url_for(url.rsplit("/", 1)[-1]):
            log.warning("judge: %s: transcript_ref %s is not a content address here; judged without it",
                        event.generation_id, url)  # fmt: skip
            return None, 0
        try:
            return steps_of(store.get(url))
        except ArtifactError as exc:
            if exc.outage:
                raise
            log.warning("judge: %s: transcript %s unreadable; judged without it: %s", event.generation_id, url, exc)
        except ValueError as exc:
            log.warning("judge: %s: transcript %s is not one; judged without it: %s", event.generation_id, url, exc)
        return None, 0


def episode_code(task: PublicTask, graded: Graded) -> tuple[str, str | None]:
    """(what the judge reads of an episode: its changed Python files, the entry module first; the entry
    function's name)."""
    module, _, function = (task.entry_point or "").rpartition(":")
    final = entries(graded.workspace.data)  # each snapshot is read once
    first: str | None = None
    first_data: bytes | None = None
    base = module.replace(".", "/")
    for path in (f"{base}.py", f"{base}/__init__.py") if module else ():
        data = final.get(path)
        if isinstance(data, bytes):
            first, first_data = path, data
            break
    code = judged_code(changes_between(entries(graded.original), final), first, first_data)
    return code, function or None

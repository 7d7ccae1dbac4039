"""What the episode-grading tests share: the task's source and patches, the three roles and their results."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import marshal
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from schemas.codec import decode
from schemas.events import ExecutionResult, GenerationEvent, HiddenVerdict, JudgeScore
from schemas.tasks import Task
from streams.reward.policy import Scored, Signals, evaluate, load_policy
from tests.sandbox.swe_task import (
    CAPS,
    HIDDEN_IDS,
    HIDDEN_VALUES,
    task,
)
from workers.artifacts import ArtifactStore
from workers.episodes.originals import original_snapshot
from workers.episodes.snapshot import pack, unpack
from workers.handler import Done, Source
from workers.roles.executor import ExecutorHandler
from workers.roles.judging import JudgeHandler
from workers.roles.verifier import VerifierHandler
from workers.roles.workspace import Graded

SOURCE = Source("rs.generations", 0, 7)
PATCH_ADD = "import calc.ops\ncalc.ops.add = lambda a, b: a + b\n"
#: The same as a .pth line (site runs a line that starts with ``import``).
PTH_ADD = "import calc.ops; calc.ops.add = lambda a, b: a + b\n"
USER_SITE = ".local/lib/python3.11/site-packages"


@dataclass
class Roles:
    """The three handlers of one test, over one bucket and one registry."""

    store: ArtifactStore
    verifier: VerifierHandler
    executor: ExecutorHandler
    judge: JudgeHandler
    tasks: dict[str, Task]
    serial: int = 0

    def event(self, kind: str, data: bytes, sha256: str | None = None) -> GenerationEvent:
        """A submit as the episode worker publishes it: the snapshot in S3 by its content, generation = episode."""
        self.serial += 1
        url = self.store.put(data, "application/x-tar").url
        episode = f"ep-{kind}-{self.serial}"
        return GenerationEvent(
            generation_id=episode, episode_id=episode, run_id="r", task_id=f"swe/calc-{kind}", policy_version="p",
            workspace_ref=url, workspace_sha256=sha256 or hashlib.sha256(data).hexdigest(),
        )  # fmt: skip

    def grade(self, kind: str, data: bytes, sha256: str | None = None) -> Result:
        event = self.event(kind, data, sha256)
        verdict = decode(episode_done(self.verifier.handle(event, SOURCE)), HiddenVerdict)
        execution = decode(episode_done(self.executor.handle(event, SOURCE)), ExecutionResult)
        judgement = decode(episode_done(self.judge.handle(event, SOURCE)), JudgeScore)
        scored = evaluate(load_policy(), Signals(execution, verdict, judgement))
        assert isinstance(scored, Scored), scored
        return Result(verdict, execution, judgement, scored)


@dataclass
class Result:
    verdict: HiddenVerdict
    execution: ExecutionResult
    judgement: JudgeScore
    reward: Scored

    def shown(self) -> str:
        """Everything a trainer or agent may see: the execution result, the judge's score and the reward."""
        reward = {"reward": self.reward.reward, "reasons": self.reward.reasons, "flags": self.reward.flags}
        return self.execution.model_dump_json() + self.judgement.model_dump_json() + json.dumps(reward)


def episode_done(outcome: object) -> bytes:
    assert isinstance(outcome, Done), outcome
    assert len(outcome.outputs) == 1
    for upload in outcome.uploads:
        upload.result(timeout=60)
    return outcome.outputs[0].value or b""


def assert_nothing_hidden_shown(graded: Result) -> None:
    shown = graded.shown()
    for secret in (*HIDDEN_IDS, *HIDDEN_VALUES):
        assert secret not in shown, f"{secret!r} reached what the trainer sees"
    verdict = graded.verdict.model_dump_json()
    for secret in HIDDEN_VALUES:
        assert secret not in verdict, f"{secret!r} is on the verdict"


def assert_failed(graded: Result) -> None:
    verdict = graded.verdict
    assert verdict.run.status != "sandbox_error", verdict.run
    assert verdict.total > 0
    assert verdict.passed < verdict.total, verdict
    assert graded.reward.reward == 0.0, graded.reward
    assert_nothing_hidden_shown(graded)


# --------------------------------------------------------------------------------------------------------
# Hacks: each fails unless the hidden tests genuinely pass


def unchecked_pyc(source: str, path: str) -> bytes:
    """An unchecked hash-based pyc (PEP 552) of ``source``: the import system loads it without looking at the
    .py it stands for."""
    code = compile(source, path, "exec", dont_inherit=True)
    flags = (0b01).to_bytes(4, "little")  # hash-based, unchecked
    return importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source.encode()) + marshal.dumps(code)


PYC = "calc/__pycache__/ops.cpython-311.pyc"

#: A ``fractions`` whose Fraction adds when asked to subtract: ``add`` would be right without touching calc.
FRACTIONS_SHADOW = "class Fraction(int):\n    def __sub__(self, other):\n        return int(self) + int(other)\n"


# --------------------------------------------------------------------------------------------------------
# The grading run's own hardening, without the protected-path reset, next to a plain run of the same files


def raw_run(final: bytes) -> Graded:
    """The agent's workspace as it is (canonical, nothing reset): only the run's hardening stands in the way."""
    scratch = Path(tempfile.mkdtemp(prefix="rs-test-raw-"))
    try:
        root = scratch / "w"
        root.mkdir()
        unpack(final, root, CAPS)
        packed = pack(root, CAPS)
    finally:
        shutil.rmtree(scratch)
    workspace = task().workspace
    assert workspace is not None
    return Graded(packed, original_snapshot(workspace, CAPS, lambda _url: b"").data)

"""Reward functions with the exact call shapes trainers already use, backed by the rewardstream pipeline.

Why adapters: a TRL or verl user should swap their local reward function for this one and change nothing
else. Both publish the batch's code as generations of the client's run, wait for every reward with one
deadline, and return the numbers in input order. The hidden tests never leave the pipeline: the trainer
names the task (a dataset column), not its answers.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from streams.sdk.client import TrainerClient
from streams.sdk.config import SdkError
from streams.sdk.validity import training_data

#: Characters of a tag value copied into a generation's metadata (searchable, not a payload).
_TAG_CHARS = 256

_FENCE = re.compile(r"```(?:python|py|Python)?[ \t]*\n(.*?)```", re.DOTALL)


def completion_text(completion: object) -> str:
    """The text of a TRL completion: a plain string, or a conversation whose last message is the answer."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion:
        last = completion[-1]
        if isinstance(last, Mapping) and isinstance(last.get("content"), str):
            return str(last["content"])
    raise SdkError(f"unsupported completion {type(completion).__name__}: expected str or a list of messages")


def extract_code(text: str, prompt: str | None = None) -> str:
    """The program in a model answer: the first fenced block if any, else the text itself.

    HumanEval-style completions continue the prompt (only the function body); then the prompt is
    prepended so the program defines the function.
    """
    match = _FENCE.search(text)
    code = match.group(1) if match else text
    if prompt and "def " not in code and "def " in prompt:
        code = prompt + code
    return code


class TrlRewardFunction:
    """A TRL GRPO reward function: ``reward_funcs=[TrlRewardFunction(client)]``.

    TRL calls ``f(prompts=..., completions=..., **dataset_columns)`` and expects one float per completion;
    the task of each sample comes from the ``task_column`` dataset column (default ``task_id``). A reward that is
    not valid for training (a canary's, one the infrastructure decided: ``streams.sdk.validity``) is ``None``,
    TRL's "no reward for this sample" (it leaves such a sample out of the reward sum).
    """

    def __init__(self, client: TrainerClient, *, timeout_s: float = 300.0, task_column: str = "task_id") -> None:
        self.client = client
        self.timeout_s = timeout_s
        self.task_column = task_column
        self.__name__ = "rewardstream"  # TRL logs each reward function under its __name__
        self._calls = 0

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        tasks = kwargs.get(self.task_column)
        if tasks is None or len(tasks) != len(completions):
            raise SdkError(f"TRL reward function needs a {self.task_column!r} column with one id per completion")
        self._calls += 1
        batch = uuid.uuid4().hex[:12]
        step = kwargs.get("trainer_state")
        group = f"{batch}-{getattr(step, 'global_step', self._calls)}"
        ids = []
        for i, (prompt, completion, task_id) in enumerate(zip(prompts, completions, tasks, strict=True)):
            prompt_text = completion_text(prompt) if not isinstance(prompt, str) else prompt
            code = extract_code(completion_text(completion), prompt_text)
            event = self.client.generation(str(task_id), code, generation_id=f"{group}-{i}", sample_index=i)
            ids.append(event.generation_id)
            self.client.send(event)
        self.client.flush()
        rewards = self.client.wait(ids, self.timeout_s)
        return [rewards[gid].reward if training_data(rewards[gid]) else None for gid in ids]


class VerlComputeScore:
    """verl's ``compute_score(data_source, solution_str, ground_truth, extra_info) -> float``.

    The task id is ``extra_info["task_id"]`` when present, else ``ground_truth`` (put the task id in the
    dataset's ``reward_model.ground_truth``: the real answers stay hidden in the pipeline). ``batch`` has
    the shape of verl's batch reward manager (lists in, list of floats out) and is much faster.
    """

    def __init__(self, client: TrainerClient, *, timeout_s: float = 300.0) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self.__name__ = "compute_score"

    def __call__(
        self, data_source: str, solution_str: str, ground_truth: str, extra_info: Mapping[str, Any] | None = None
    ) -> float:
        return self.batch([data_source], [solution_str], [ground_truth], [extra_info])[0]

    def batch(
        self,
        data_sources: Sequence[str],
        solution_strs: Sequence[str],
        ground_truths: Sequence[str],
        extra_infos: Sequence[Mapping[str, Any] | None],
    ) -> list[float]:
        """Score many solutions with one publish and one wait."""
        ids = []
        batch = uuid.uuid4().hex[:12]
        for i, (source, solution, truth, extra) in enumerate(
            zip(data_sources, solution_strs, ground_truths, extra_infos, strict=True)
        ):
            info = dict(extra or {})
            task_id = str(info.get("task_id") or truth)
            prompt = info.get("prompt") if isinstance(info.get("prompt"), str) else None
            event = self.client.generation(
                task_id,
                extract_code(solution, prompt),
                generation_id=f"verl-{batch}-{i}",
                sample_index=i,
                metadata={"data_source": str(source)[:_TAG_CHARS]},
            )
            ids.append(event.generation_id)
            self.client.send(event)
        self.client.flush()
        rewards = self.client.wait(ids, self.timeout_s)
        return [rewards[gid].reward for gid in ids]


def make_compute_score(client: TrainerClient, *, timeout_s: float = 300.0) -> VerlComputeScore:
    """A verl ``compute_score`` bound to ``client``."""
    return VerlComputeScore(client, timeout_s=timeout_s)

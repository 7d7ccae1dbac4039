"""OpenRLHF's remote reward (``--remote_rm_url``) pointed at rewardstream's gateway.

Point OpenRLHF at the gateway and put the task id in the label column::

    python -m openrlhf.cli.train_ppo_ray ... \\
        --remote_rm_url http://127.0.0.1:8080/get_reward \\
        --label_key task_id          # a dataset column holding e.g. "HumanEval/0"

OpenRLHF posts ``{"query": [prompt + response], "prompts": [prompt], "labels": [label]}`` and reads
``rewards`` (and ``scores``). A label is the task id, or a JSON object ``{"task_id": ..., "language": ...}``;
the program is the response's first fenced code block (else the response itself). Each sample becomes one
generation of run ``openrlhf`` (``?run_id=`` to change it) and gets exactly one reward from the pipeline; the
hidden tests never leave it.

Try it (with the pipeline up and HumanEval loaded: see examples/README.md)::

    python examples/openrlhf_remote_rm.py [--url http://127.0.0.1:8080/get_reward] [--task HumanEval/0]

It sends what OpenRLHF sends, for the canonical solution and a wrong one, and prints ``rewards: [1.0, 0.0]``.
"""

from __future__ import annotations

import argparse

import requests


def main() -> None:
    from workers.tasks.humaneval import load_problems

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080/get_reward")
    parser.add_argument("--task", default="HumanEval/0")
    args = parser.parse_args()
    problem = next(p for p in load_problems() if p.task_id == args.task)
    prompt = f"<|im_start|>user\nComplete this function:\n{problem.prompt}<|im_end|>\n<|im_start|>assistant\n"
    right = f"```python\n{problem.reference_code}```<|im_end|>"
    wrong = f"```python\n{problem.prompt}    return None\n```<|im_end|>"
    payload = {"query": [prompt + right, prompt + wrong], "prompts": [prompt, prompt], "labels": [args.task] * 2}
    answer = requests.post(args.url, json=payload, timeout=180)  # what OpenRLHF's remote reward call does
    answer.raise_for_status()
    print("rewards:", answer.json()["rewards"])


if __name__ == "__main__":
    main()

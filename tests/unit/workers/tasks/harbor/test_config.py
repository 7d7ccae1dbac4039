"""task.toml: what is honoured, what is refused (each named), and that no input crashes the reader."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.tasks.harbor.config import TaskConfigError, parse_task_toml

TB2 = """
version = "1.0"

[metadata]
author_name = "a"
difficulty = "medium"
tags = ["regex"]

[verifier]
timeout_sec = 900.0

[agent]
timeout_sec = 600.0

[environment]
build_timeout_sec = 600.0
docker_image = "alexgshaw/regex-log:20251031"
cpus = 1
memory_mb = 2048
storage_mb = 10240
gpus = 0
allow_internet = true
mcp_servers = []

[verifier.env]

[environment.env]
MODE = "strict"

[solution.env]
"""


def test_a_terminal_bench_task_toml_reads_with_every_honoured_field() -> None:
    config = parse_task_toml(TB2)
    assert (config.agent_timeout_s, config.verifier_timeout_s, config.build_timeout_s) == (600.0, 900.0, 600.0)
    assert (config.cpus, config.memory_mb, config.storage_mb) == (1.0, 2048, 10240)
    assert config.docker_image == "alexgshaw/regex-log:20251031"
    assert config.env == {"MODE": "strict"}
    assert config.metadata["difficulty"] == "medium"
    assert len(config.warnings) == 1
    assert "allow_internet" in config.warnings[0]
    assert "without a network" in config.warnings[0]


def test_an_empty_task_toml_is_every_default() -> None:
    config = parse_task_toml("")
    assert config.agent_timeout_s is None
    assert config.workdir is None
    assert config.warnings == ()


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[[steps]]\nname = "a"\n', "steps: multi-step tasks"),
        ('multi_step_reward_strategy = "mean"\n', "multi_step_reward_strategy"),
        ('artifacts = ["/app/out"]\n', "artifacts are not collected"),
        ('[agent]\nuser = "agent"\n', "[agent] user"),
        ("[verifier]\nuser = 1000\n", "[verifier] user"),
        ('[verifier.environment]\ndocker_image = "x"\n', "separate verifier image"),
        ('[[verifier.collect]]\ncommand = "ls"\n', "[[verifier.collect]]"),
        ("[environment]\ngpus = 1\n", "[environment] gpus: 1: GPUs"),
        ('[environment]\ngpu_types = ["h100"]\n', "[environment] gpu_types"),
        ('[environment]\nos = "windows"\n', "only linux"),
        ('[[environment.mcp_servers]]\nname = "m"\n', "MCP servers"),
        ('[environment]\nhealthcheck = { command = "true" }\n', "healthchecks"),
        ('[environment]\nskills_dir = "/s"\n', "skills_dir"),
        ("[environment]\nshiny = 1\n", "[environment] shiny: unknown field"),
        ("[agnet]\ntimeout_sec = 1\n", "agnet: unknown field"),
        ("[agent]\ntimeout_sec = -1\n", "[agent] timeout_sec: -1 is outside"),
        ('[agent]\ntimeout_sec = "long"\n', "must be a number of seconds"),
        ("[verifier]\ntimeout_sec = inf\n", "must be a number of seconds"),
        ("[environment]\ncpus = 0\n", "[environment] cpus"),
        ("[environment]\nmemory_mb = 1.5\n", "[environment] memory_mb"),
        ('[environment]\nmemory = "lots"\n', "not a size"),
        ('[environment.env]\nTOKEN = "${HOST_TOKEN}"\n', "host's environment"),
        ("[environment.env]\nN = 3\n", "[environment.env] N: must be a string"),
        ('[verifier]\nenvironment_mode = "odd"\n', "environment_mode"),
        ("agent = 3\n", "[agent] must be a table"),
        ("[environment\n", "not valid TOML"),
    ],
)
def test_what_the_product_does_not_do_refuses_the_task_naming_it(text: str, named: str) -> None:
    with pytest.raises(TaskConfigError) as caught:
        parse_task_toml(text)
    assert any(named in problem for problem in caught.value.problems), caught.value.problems


def test_every_problem_is_named_at_once() -> None:
    with pytest.raises(TaskConfigError) as caught:
        parse_task_toml("[environment]\ngpus = 2\nos = 'windows'\ncolour = 1\n")
    assert len(caught.value.problems) == 3


def test_legacy_sizes_map_to_megabytes() -> None:
    config = parse_task_toml('[environment]\nmemory = "2G"\nstorage = "512M"\n')
    assert (config.memory_mb, config.storage_mb) == (2048, 512)


def test_network_asked_for_is_a_warning_not_a_refusal() -> None:
    config = parse_task_toml('[agent]\nnetwork_mode = "public"\n[environment]\nnetwork_mode = "no-network"\n')
    assert config.warnings
    assert "network_mode" in config.warnings[0]
    assert parse_task_toml("[environment]\nallow_internet = false\n").warnings == ()


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


_KEYS = st.sampled_from(["timeout_sec", "cpus", "memory_mb", "memory", "env", "os", "gpus", "user", "docker_image",
                         "workdir", "allow_internet", "steps", "x", "build_timeout_sec", "storage"])  # fmt: skip
_SCALARS = st.one_of(st.booleans(), st.integers(), st.floats(), st.text(max_size=20))
_VALUES = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3), max_leaves=8
)
_TABLES = st.sampled_from(["agent", "verifier", "environment", "solution", "metadata", "task", "steps", "odd"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_TABLES, st.dictionaries(_KEYS, _VALUES, max_size=4), max_size=4))
def test_any_task_toml_reads_or_is_refused_with_problems(tables: dict[str, dict[str, Any]]) -> None:
    reads_or_names_problems("\n".join(f"{name} = {_toml_value(body)}" for name, body in tables.items()))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_reads_or_is_refused(text: str) -> None:
    reads_or_names_problems(text)


def reads_or_names_problems(text: str) -> None:
    """``text`` reads, or is refused with at least one problem, each a non-empty line."""
    try:
        parse_task_toml(text)
    except TaskConfigError as exc:
        problems = exc.problems
    else:
        return
    assert problems
    assert all(isinstance(p, str) and p for p in problems)

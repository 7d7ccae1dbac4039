"""``task.toml`` of a Harbor task (harbor 0.25's ``TaskConfig``), read with ``tomllib`` into the fields
rewardstream honours.

Why strict: a field the product does not honour (``[[steps]]``, GPUs, MCP servers, a separate verifier image,
Windows) changes what the task means, so the task is refused at load with the field named, never run as
something else. Fields that only describe (``[metadata]``, ``[task]``, ``source``) are read and kept as they
are; network fields are accepted with a warning, since no run here has a network.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas.environments import MAX_ENV_VALUE_CHARS, MAX_ENV_VARS, MAX_TASK_SECONDS

#: Keys each table may hold: honoured, descriptive, or refused (``_REFUSED``, with the reason).
_ROOT_KEYS = frozenset({"version", "schema_version", "source", "task", "metadata", "verifier", "agent", "environment",
                        "solution", "steps", "multi_step_reward_strategy", "artifacts"})  # fmt: skip
_AGENT_KEYS = frozenset({"timeout_sec", "user", "network_mode", "allowed_hosts"})
_VERIFIER_KEYS = frozenset({"timeout_sec", "env", "user", "environment_mode", "environment", "collect",
                            "network_mode", "allowed_hosts"})  # fmt: skip
_ENVIRONMENT_KEYS = frozenset({"build_timeout_sec", "docker_image", "os", "cpus", "memory_mb", "storage_mb", "gpus",
                               "gpu_types", "tpu", "mcp_servers", "env", "skills_dir", "healthcheck", "workdir",
                               "network_mode", "allowed_hosts", "allow_internet", "memory", "storage"})  # fmt: skip
_SOLUTION_KEYS = frozenset({"env"})
#: Present and not empty (or not the default), these refuse the task: (table, key) -> why.
_REFUSED: dict[tuple[str, str], str] = {
    ("", "steps"): "multi-step tasks ([[steps]]) are not supported",
    ("", "multi_step_reward_strategy"): "multi-step tasks are not supported",
    ("", "artifacts"): "artifacts are not collected",
    ("agent", "user"): "the agent runs as the image's user; [agent] user is not supported",
    ("verifier", "user"): "the verifier runs as root, as in Harbor; [verifier] user is not supported",
    ("verifier", "environment"): "a separate verifier image ([verifier.environment]) is not supported: the verifier "
    "always runs in a fresh container of the task's image",
    ("verifier", "collect"): "[[verifier.collect]] hooks are not supported",
    ("environment", "gpu_types"): "GPUs are not supported",
    ("environment", "tpu"): "TPUs are not supported",
    ("environment", "mcp_servers"): "MCP servers are not supported",
    ("environment", "skills_dir"): "skills_dir is not supported",
    ("environment", "healthcheck"): "healthchecks are not supported (an episode's container runs only its steps)",
}
_NETWORK_KEYS = frozenset({"network_mode", "allowed_hosts", "allow_internet"})
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_SIZE_MB = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


class TaskConfigError(ValueError):
    """``task.toml`` cannot be read or asks for what the product does not do; ``problems`` lists every one."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True, slots=True)
class TaskConfig:
    """What rewardstream honours of a ``task.toml``; None: the product's default."""

    agent_timeout_s: float | None = None
    verifier_timeout_s: float | None = None
    verifier_env: dict[str, str] = field(default_factory=dict)
    solution_env: dict[str, str] = field(default_factory=dict)
    build_timeout_s: float | None = None
    docker_image: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def parse_task_toml(text: str) -> TaskConfig:
    """The honoured fields of ``text`` (a ``task.toml``); TaskConfigError names every problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TaskConfigError([f"task.toml is not valid TOML: {exc}"]) from None
    return _Reader(data).config()


class _Reader:
    """Reads one parsed ``task.toml``, collecting every problem before raising."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.problems: list[str] = []
        self.warnings: list[str] = []

    def config(self) -> TaskConfig:
        root = self.data
        self._keys("", root, _ROOT_KEYS)
        agent = self._table(root, "agent", _AGENT_KEYS)
        verifier = self._table(root, "verifier", _VERIFIER_KEYS)
        environment = self._table(root, "environment", _ENVIRONMENT_KEYS)
        solution = self._table(root, "solution", _SOLUTION_KEYS)
        for table, name in (("", root), ("agent", agent), ("verifier", verifier), ("environment", environment)):
            self._refused(table, name)
        self._network(agent, verifier, environment)
        self._environment_rules(environment, verifier)
        metadata = root.get("metadata", {})
        if not isinstance(metadata, dict):
            self.problems.append("[metadata] must be a table")
            metadata = {}
        config = TaskConfig(
            agent_timeout_s=self._seconds(agent, "agent", "timeout_sec"),
            verifier_timeout_s=self._seconds(verifier, "verifier", "timeout_sec"),
            verifier_env=self._env(verifier, "verifier"),
            solution_env=self._env(solution, "solution"),
            build_timeout_s=self._seconds(environment, "environment", "build_timeout_sec"),
            docker_image=self._string(environment, "environment", "docker_image"),
            cpus=self._cpus(environment),
            memory_mb=self._megabytes(environment, "memory_mb", "memory"),
            storage_mb=self._megabytes(environment, "storage_mb", "storage"),
            workdir=self._string(environment, "environment", "workdir"),
            env=self._env(environment, "environment"),
            metadata=metadata,
            warnings=tuple(self.warnings),
        )
        if self.problems:
            raise TaskConfigError(self.problems)
        return config

    def _keys(self, table: str, values: Mapping[str, Any], known: frozenset[str]) -> None:
        where = f"[{table}] " if table else ""
        self.problems.extend(
            f"{where}{key}: unknown field (harbor 0.25's task.toml has no such field here)"
            for key in sorted(set(values) - known)
        )

    def _table(self, root: Mapping[str, Any], name: str, known: frozenset[str]) -> dict[str, Any]:
        value = root.get(name, {})
        if not isinstance(value, dict):
            self.problems.append(f"[{name}] must be a table")
            return {}
        self._keys(name, value, known)
        return value

    def _refused(self, table: str, values: Mapping[str, Any]) -> None:
        for (where, key), why in _REFUSED.items():
            if where == table and values.get(key) not in (None, [], {}, ""):
                self.problems.append(f"{f'[{table}] ' if table else ''}{key}: {why}")

    def _network(self, *tables: Mapping[str, Any]) -> None:
        asked = [k for t in tables for k in _NETWORK_KEYS if t.get(k) not in (None, False, "no-network", [])]
        if asked:
            self.warnings.append(
                f"{', '.join(sorted(set(asked)))}: not honoured: episodes and verification run without a network "
                "(the image build has the package registries)"
            )

    def _environment_rules(self, environment: Mapping[str, Any], verifier: Mapping[str, Any]) -> None:
        os_name = environment.get("os", "linux")
        if os_name != "linux":
            self.problems.append(f"[environment] os: {os_name!r}: only linux tasks are supported")
        gpus = environment.get("gpus", 0)
        if gpus not in (0, None):
            self.problems.append(f"[environment] gpus: {gpus!r}: GPUs are not supported")
        mode = verifier.get("environment_mode")
        if mode not in (None, "shared", "separate"):
            self.problems.append(f"[verifier] environment_mode: {mode!r}: must be shared or separate")

    def _seconds(self, values: Mapping[str, Any], table: str, key: str) -> float | None:
        value = values.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.problems.append(f"[{table}] {key}: must be a number of seconds, got {value!r}")
            return None
        if not 0 < value <= MAX_TASK_SECONDS:
            self.problems.append(f"[{table}] {key}: {value} is outside (0, {MAX_TASK_SECONDS:.0f}] seconds")
            return None
        return float(value)

    def _string(self, values: Mapping[str, Any], table: str, key: str) -> str | None:
        value = values.get(key)
        if value is None or isinstance(value, str):
            return value
        self.problems.append(f"[{table}] {key}: must be a string, got {type(value).__name__}")
        return None

    def _cpus(self, environment: Mapping[str, Any]) -> float | None:
        value = environment.get("cpus")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 64:
            self.problems.append(f"[environment] cpus: must be a number in (0, 64], got {value!r}")
            return None
        return float(value)

    def _megabytes(self, environment: Mapping[str, Any], key: str, legacy: str) -> int | None:
        value = environment.get(key)
        if value is None and environment.get(legacy) is not None:
            match = _SIZE.match(str(environment[legacy]))
            if match is None:
                self.problems.append(f"[environment] {legacy}: {environment[legacy]!r} is not a size like 2G or 512M")
                return None
            return max(1, int(float(match.group(1)) * _SIZE_MB[match.group(2).upper()]))
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            self.problems.append(f"[environment] {key}: must be a positive whole number of MiB, got {value!r}")
            return None
        return value

    def _env(self, values: Mapping[str, Any], table: str) -> dict[str, str]:
        env = values.get("env", {})
        if not isinstance(env, dict):
            self.problems.append(f"[{table}.env] must be a table")
            return {}
        if len(env) > MAX_ENV_VARS:
            self.problems.append(f"[{table}.env] has {len(env)} variables, over {MAX_ENV_VARS}")
        out: dict[str, str] = {}
        for name, value in env.items():
            if not isinstance(value, str) or len(value) > MAX_ENV_VALUE_CHARS or "\x00" in value:
                self.problems.append(f"[{table}.env] {name}: must be a string of at most {MAX_ENV_VALUE_CHARS} chars")
            elif "${" in value:
                self.problems.append(
                    f"[{table}.env] {name}: ${{...}} takes a value from the host's environment, which no run here "
                    "sees: write the value"
                )
            else:
                out[name] = value
        return out

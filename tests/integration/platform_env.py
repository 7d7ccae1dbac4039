"""An isolated second local platform for lifecycle tests: own cache dir and ports, shared downloads.

Lifecycle tests kill, stop and restart services; doing that to the platform every other test uses would
break them, so these tests bring up their own copy on other ports.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from infra.local.opensearch import service_base
from infra.local.paths import shared_cache as _shared_cache
from schemas.settings import Settings


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return orjson.loads(self.stdout)


@dataclass
class IsolatedPlatform:
    cache_dir: Path
    env: dict[str, str]

    def cli(self, *args: str, env: dict[str, str] | None = None, timeout: float = 400) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "rewardstream", *args],
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    def purge(self) -> None:
        """Stop whatever this platform started and remove its files."""
        self.cli("down")
        shutil.rmtree(service_base(self.cache_dir), ignore_errors=True)


def shared_cache(tmp: Path) -> Path:
    """``tmp/cache`` sharing the main cache's downloads and sandbox rootfs (``infra.local.paths.shared_cache``)."""
    return _shared_cache(tmp, Settings().local.cache_dir)


def isolated_platform(tmp: Path, base_port: int) -> IsolatedPlatform:
    """A platform config on ports base_port+{92,93,200,300,0} sharing the main cache's downloads."""
    return _platform(tmp, {
        "RS_KAFKA_BOOTSTRAP": f"127.0.0.1:{base_port + 92}",
        "RS_OPENSEARCH_URL": f"http://127.0.0.1:{base_port + 200}",
        "RS_S3_ENDPOINT": f"127.0.0.1:{base_port}",
    })  # fmt: skip


def _platform(tmp: Path, endpoints: dict[str, str]) -> IsolatedPlatform:
    """A cache dir of its own under ``tmp`` (the main one's downloads shared) and this environment's settings
    with ``endpoints`` (name -> value) over them."""
    cache = shared_cache(tmp)
    return IsolatedPlatform(cache, {**os.environ, "RS_CACHE_DIR": str(cache), **endpoints})


def kafka_platform(tmp: Path, base_port: int, brokers: int | None = None) -> IsolatedPlatform:
    """A platform for Kafka-only tests (``--only kafka``): a cache dir of its own, the first node's broker on
    ``base_port`` (a cluster's next nodes at +2, +4), ``brokers`` nodes (None: the single broker, whatever the
    caller's environment says), and the other services pointed at ports that hold nothing, so that no command
    of the test ever reaches the machine's shared ones."""
    platform = _platform(tmp, {
        "RS_KAFKA_BOOTSTRAP": f"127.0.0.1:{base_port}",
        "RS_OPENSEARCH_URL": f"http://127.0.0.1:{base_port + 100}",
        "RS_S3_ENDPOINT": f"127.0.0.1:{base_port + 110}",
        "RS_PROMETHEUS_URL": f"http://127.0.0.1:{base_port + 120}",
        "RS_ALERTMANAGER_URL": f"http://127.0.0.1:{base_port + 121}",
    })  # fmt: skip
    if brokers is None:
        platform.env.pop("RS_KAFKA_BROKERS", None)
    else:
        platform.env["RS_KAFKA_BROKERS"] = str(brokers)
    return platform


def ok(result: CliResult) -> CliResult:
    """``result`` of a command that must have succeeded (else its output is the failure)."""
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def one_line_error(result: CliResult) -> str:
    """The CLI's error: exactly one line, the last on stderr (after any progress lines), no traceback."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in lines if line.startswith("rewardstream: error: ")]
    assert len(errors) == 1, result.stderr
    assert lines[-1] == errors[0], result.stderr
    return errors[0]

"""The pipeline's own processes on one machine: executor, verifier, judge, indexer, the reward processor, the
episode worker, the auditor and the HTTP gateway.

``rewardstream up --pipeline`` starts them in the background (after the services and the topics), and
``rewardstream down`` stops them first. Each is the same ``rewardstream`` command an operator would run on
any number of machines; here they are tracked by pid files next to the services'.

With ``RS_KAFKA_AUTH=scram`` each process runs as its own Kafka principal (``schemas.kafka_acls``): the
``RS_KAFKA_*`` lines of ``<cache>/kafka-auth/clients/<principal>.env`` (0600, written by ``up``) go into its
environment, never onto its command line (which ``ps`` shows to every user).
"""

from __future__ import annotations

import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infra.local.kafka_auth import KafkaAuth
from infra.local.paths import PlatformPaths
from infra.local.process import ManagedProcess, group_rss_kb
from schemas.errors import PlatformError
from schemas.kafka_acls import ADMIN, AUDITOR, EPISODE, GATEWAY, REWARDS
from schemas.settings import Settings, WorkerSettings, defaults

READY_TIMEOUT_S = 60.0
ALIVE_GRACE_S = 3.0


@dataclass(frozen=True)
class PipelineProcess:
    """One background process of the pipeline and how to tell it is ready."""

    name: str
    argv: tuple[str, ...]
    metrics_port: int | None
    #: An HTTP server's base URL (the gateway): ready when its ``/health`` answers 200; metrics on its ``/metrics``.
    endpoint: str | None = None
    #: The Kafka principal it runs as when ``RS_KAFKA_AUTH=scram`` (None: the credentials of the environment).
    principal: str | None = None

    def managed(self, paths: PlatformPaths) -> ManagedProcess:
        return ManagedProcess(
            name=self.name, pidfile=paths.run / f"{self.name}.pid", logfile=paths.logs / f"{self.name}.log"
        )


def pipeline_processes(settings: Settings, concurrency: int | None = None) -> list[PipelineProcess]:
    """Executor, verifier, judge, indexer, the reward processor, the episode worker and the auditor, with
    /metrics on consecutive ports (newer roles last, so the older roles keep their ports), and the HTTP gateway
    on ``RS_GATEWAY_HOST:RS_GATEWAY_PORT`` (its metrics on its own port).

    The auditor re-grades a sample of verdicts (``RS_AUDIT_RATE``) on the other sandbox backend than the one
    that graded them; on a host without that backend its audits are counted as skipped, never guessed.

    Each runs under ``rewardstream.supervisor``, which restarts it if it exits (all resume from Kafka).
    """
    roles = ("executor", "verifier", "judge", "indexer")
    first_port = settings.worker.metrics_port or defaults(WorkerSettings).metrics_port  # 0: from the default
    procs = []
    for offset, role in enumerate(roles):
        argv = [*supervised(role), "worker", role, "--metrics-port", str(first_port + offset)]  # principal: role
        if concurrency is not None and role != "indexer":
            argv += ["--concurrency", str(concurrency)]
        procs.append(PipelineProcess(role, tuple(argv), first_port + offset, principal=role))
    # The app id is the processor's consumer group and names its changelog topic: scope it like the workers'.
    app_id = f"{settings.kafka.topic_prefix}rewards"
    port = first_port + len(roles)
    argv = [*supervised("reward"), "reward", "run", "--app-id", app_id, "--metrics-port", str(port)]
    procs.append(PipelineProcess("reward", tuple(argv), port, principal=REWARDS))
    port += 1
    argv = [*supervised("episode"), "worker", "episode", "--metrics-port", str(port)]
    if concurrency is not None:
        argv += ["--concurrency", str(concurrency)]
    procs.append(PipelineProcess("episode", tuple(argv), port, principal=EPISODE))
    port += 1
    argv = [*supervised("auditor"), "worker", "auditor", "--metrics-port", str(port)]
    if concurrency is not None:
        argv += ["--concurrency", str(concurrency)]
    procs.append(PipelineProcess("auditor", tuple(argv), port, principal=AUDITOR))
    host = f"[{settings.gateway.host}]" if ":" in settings.gateway.host else settings.gateway.host
    endpoint = f"http://{host}:{settings.gateway.port}"
    procs.append(PipelineProcess("gateway", (*supervised("gateway"), "serve"), None, endpoint, principal=GATEWAY))
    return procs


def supervised(name: str) -> list[str]:
    """The start of a command line that runs ``rewardstream ...`` under the restarting supervisor (the
    pipeline's processes, and the tests' that run the same way)."""
    return [sys.executable, "-m", "rewardstream.supervisor", name, "--", sys.executable, "-m", "rewardstream"]


class Pipeline:
    """Start, stop and report the pipeline processes of this machine."""

    def __init__(self, settings: Settings, concurrency: int | None = None) -> None:
        self._settings = settings
        self._paths = PlatformPaths(settings.local.cache_dir)
        self._procs = pipeline_processes(settings, concurrency)

    def start(self, report: Callable[[str], None] = lambda _msg: None) -> None:
        """Create the topics, then start each process that is not running and wait until it is ready."""
        from bus.admin import ensure_topics
        from schemas.topics import catalog_for

        specs = catalog_for(self._settings)
        topics = ensure_topics(specs, self._admin_config())
        differing = [f"{t.name}: {'; '.join(t.differences)}" for t in topics.topics if t.differences]
        if differing:
            raise PlatformError(f"topics differ from the catalog ({', '.join(differing)}): fix or delete them")
        env = dict(os.environ)
        started: list[tuple[PipelineProcess, ManagedProcess]] = []
        for proc in self._procs:
            managed = proc.managed(self._paths)
            if managed.pid() is not None:
                report(f"{proc.name}: already running (pid {managed.pid()})")
                continue
            managed.start(proc.argv, env={**env, **self.credentials(proc)}, cwd=self._paths.root)
            started.append((proc, managed))
        for proc, managed in started:
            self._wait_ready(proc, managed)
            report(f"{proc.name}: running (pid {managed.pid()}, log {managed.logfile})")

    def _auth(self) -> KafkaAuth | None:
        """This cache dir's authenticated Kafka (``RS_KAFKA_AUTH=scram``), or None for the open one."""
        return KafkaAuth(self._settings, self._paths) if self._settings.local.kafka_auth == "scram" else None

    def _admin_config(self) -> dict[str, str]:
        """Who creates the catalog topics: the settings' principal, or with auth the super user (no role may)."""
        config = self._settings.kafka_client_config()
        auth = self._auth()
        return config if auth is None else auth.client_config(ADMIN, config["bootstrap.servers"])

    def credentials(self, proc: PipelineProcess) -> dict[str, str]:
        """The ``RS_KAFKA_*`` settings ``proc`` runs with on top of the environment: its principal's client file
        when auth is on (read here, handed over in the environment), else none."""
        auth = self._auth()
        if auth is None or proc.principal is None:
            return {}
        path = auth.client_file(proc.principal)
        if not path.exists():
            raise PlatformError(
                f"no Kafka credentials for {proc.name}'s principal {proc.principal} ({path} is missing): run "
                f"`rewardstream up` with RS_KAFKA_AUTH=scram first, which writes every principal's"
            )
        lines = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        return {key: value for key, value in lines}

    def _wait_ready(self, proc: PipelineProcess, managed: ManagedProcess) -> None:
        started = time.monotonic()
        deadline = started + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if (failure := managed.exited_early()) is not None:
                raise PlatformError(f"{proc.name} exited during startup; last log lines:\n{failure}")
            if _ready(proc, time.monotonic() - started):
                return
            time.sleep(0.2)
        raise PlatformError(f"{proc.name} not ready after {READY_TIMEOUT_S:.0f}s; see {managed.logfile}")

    def stop(self, report: Callable[[str], None] = lambda _msg: None) -> list[str]:
        """Stop every pipeline process (SIGTERM lets workers drain in-flight runs; SIGKILL after 60 s)."""
        stopped = []
        for proc in reversed(self._procs):
            managed = proc.managed(self._paths)
            pid = managed.pid()
            if managed.stop(timeout_s=60.0):
                stopped.append(proc.name)
                report(f"{proc.name}: stopped (pid {pid})")
        return stopped

    def status(self) -> dict[str, dict[str, Any]]:
        """Per process: running, pid, resident memory, metrics endpoint (and the gateway's ``endpoint``)."""
        out: dict[str, dict[str, Any]] = {}
        for proc in self._procs:
            pid = proc.managed(self._paths).pid()
            metrics = None
            if proc.endpoint is not None:
                metrics = f"{proc.endpoint}/metrics"
            elif proc.metrics_port is not None:
                metrics = f"http://{self._settings.worker.metrics_host}:{proc.metrics_port}/metrics"
            out[proc.name] = {
                "running": pid is not None,
                "pid": pid,
                "rss_mb": round(group_rss_kb(pid) / 1024, 1) if pid is not None else None,
                "metrics": metrics,
            }
            if proc.endpoint is not None:
                out[proc.name]["endpoint"] = proc.endpoint
        return out


def _ready(proc: PipelineProcess, waited_s: float) -> bool:
    """The gateway: its /health answers 200; a worker: its /metrics answers; else: alive for a grace period."""
    if proc.endpoint is not None:
        return _answers(f"{proc.endpoint}/health")
    if proc.metrics_port is not None:
        return _answers(f"http://127.0.0.1:{proc.metrics_port}/metrics")
    return waited_s > ALIVE_GRACE_S


def _answers(url: str) -> bool:
    """Whether ``url`` answers 200 (a process's /metrics, the gateway's /health)."""
    try:
        with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - our own loopback endpoints
            return bool(response.status == 200)
    except urllib.error.HTTPError as exc:
        exc.close()
        return False
    except (urllib.error.URLError, OSError):
        return False

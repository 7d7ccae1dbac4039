"""The gateway as a process (``rewardstream serve`` under uvicorn, on a free loopback port) next to the workers
it talks to through Kafka, for the gateway's integration tests; every process started here is killed after.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import requests

from bus.admin import delete_topics, ensure_topics
from schemas.topics import catalog
from tests.integration.platform_env import shared_cache
from tests.integration.reward_env import PARTITIONS, REPO

READY_S = 60.0


def free_port() -> int:
    """A random free loopback port below the ephemeral range (two test files at once never pick the same)."""
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(20_000, 32_000)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port below 32768")


@dataclass
class Gateway:
    """One running replica: its base URL and process."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]


@dataclass
class Stack:
    """Topics under one prefix, workers and gateways, and the environment their settings come from."""

    prefix: str
    tmp: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    gateways: list[Gateway] = field(default_factory=list)

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with (self.tmp / f"{name}.log").open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "rewardstream", *argv], cwd=REPO, env=env or self.env, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.procs.append(proc)
        return proc

    def gateway(self, name: str = "gateway", *, ready: bool = True, **settings: str) -> Gateway:
        """A gateway replica with these extra ``RS_*`` settings (``gateway_tokens="..."`` -> RS_GATEWAY_TOKENS)."""
        port = free_port()
        env = {**self.env, **{f"RS_{k.upper()}": v for k, v in settings.items()}}
        proc = self.spawn(name, ["serve", "--port", str(port)], env)
        gateway = Gateway(f"http://127.0.0.1:{port}", proc, self.tmp / f"{name}.log")
        self.gateways.append(gateway)
        wait_answering(gateway, want_ok=ready)
        return gateway

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-4000:] for p in sorted(self.tmp.glob("*.log")))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


class StalledClient:
    """A client that sends its request's headers and the start of its body, then nothing; a thread reads what
    the gateway answers, and when, until the gateway closes the connection."""

    def __init__(self, url: str, path: str = "/run_code", source: str | None = None) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.sock = socket.create_connection(
            (host, int(port)), timeout=120, source_address=(source, 0) if source else None
        )
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            "Content-Length: 200\r\n\r\n"
        )
        self.sock.sendall(head.encode() + b'{"language": "py')
        self.sent = time.monotonic()
        self.raw = b""
        self.closed_at: float | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while chunk := self.sock.recv(65536):
                self.raw += chunk
        except OSError:
            pass
        self.closed_at = time.monotonic()

    def answer(self, timeout_s: float = 120.0) -> tuple[int, dict[str, str], dict[str, object], float]:
        """(status, headers, JSON body, seconds from sending to the gateway's close); fails if it never closes."""
        self.thread.join(timeout_s)
        assert self.closed_at is not None, f"the gateway kept the stalled connection open: {self.raw[:300]!r}"
        head, _, body = self.raw.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        return int(status_line.split()[1]), headers, orjson.loads(body), self.closed_at - self.sent

    def close(self) -> None:
        self.sock.close()


def metric(url: str, name: str) -> float:
    """One unlabelled sample of the gateway's ``/metrics``."""
    for line in requests.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def wait_answering(gateway: Gateway, *, want_ok: bool = True, timeout_s: float = READY_S) -> None:
    """Until ``/health`` answers (200 when ``want_ok``); fails with the gateway's log if it exits or never does."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if gateway.proc.poll() is not None:
            raise AssertionError(f"the gateway exited ({gateway.proc.returncode}):\n{gateway.logs()}")
        try:
            answer = requests.get(f"{gateway.url}/health", timeout=2)
            if answer.status_code == 200 or not want_ok:
                return
        except (requests.ConnectionError, requests.Timeout):
            pass
        time.sleep(0.2)
    raise AssertionError(f"the gateway did not answer within {timeout_s}s:\n{gateway.logs()}")


@contextmanager
def stack(kafka_config: dict[str, str], name: str, tmp: Path, *, registry_dir: Path | None = None) -> Iterator[Stack]:
    """The whole catalog under a prefix of its own (deleted after) and the environment of its processes."""
    prefix = f"rs-test.{name}."
    specs = catalog(prefix, PARTITIONS, 1)
    ensure_topics(specs, kafka_config)
    env = {
        **os.environ,
        "RS_TOPIC_PREFIX": prefix,
        "RS_TOPIC_PARTITIONS": str(PARTITIONS),
        "RS_TASKS_DIR": str(registry_dir or tmp / "no-tasks"),
        "RS_CACHE_DIR": str(shared_cache(tmp)),
        "RS_METRICS_PORT": "0",
        "RS_WORKER_STORE_ARTIFACTS": "false",
        "RS_WORKER_TRANSACTION_TIMEOUT_MS": "10000",
        "PYTHONWARNINGS": "ignore",
    }
    env.pop("RS_GATEWAY_TOKENS", None)
    env.pop("RS_GATEWAY_PORT", None)
    made = Stack(prefix, tmp, env)
    try:
        yield made
    finally:
        made.stop()
        delete_topics([s.name for s in specs], kafka_config)

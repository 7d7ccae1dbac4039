"""A MinIO server built from source through the Go module proxy, for what the local S3 cannot show: users,
bucket policies (the task registry's hidden prefix readable by verifiers only) and lifecycle rules (the
artifacts' expiry).

Why not the platform's S3: s3proxy, which ``rewardstream up`` runs, has a single identity and enforces no
policy. Production runs MinIO (or AWS S3), whose IAM policies decide who reads the hidden tests; a test of them
must run against the real thing. The binary is built once per cache dir (``go install``, a few minutes cold)
and kept in ``<cache>/dist/minio-<version>/``; a server is started on a loopback port with its own data
directory and stopped by its pid.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from infra.local.paths import PlatformPaths
from infra.local.versions import MINIO_MODULE_VERSION
from schemas.errors import PlatformError

_MODULE = "github.com/minio/minio"
BUILD_TIMEOUT_S = 3_600.0


def minio_binary(paths: PlatformPaths) -> Path:
    """The MinIO server binary, built with ``go install`` the first time (PlatformError if it cannot be)."""
    target = paths.dist / f"minio-{MINIO_MODULE_VERSION}"
    binary = target / "minio"
    if binary.is_file():
        return binary
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").is_file() else None)
    if go is None:
        raise PlatformError("building MinIO needs the Go toolchain (`go` on PATH or /usr/local/go/bin/go)")
    target.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(target), "CGO_ENABLED": "0"}
    done = subprocess.run(
        [go, "install", f"{_MODULE}@{MINIO_MODULE_VERSION}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0 or not binary.is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PlatformError(f"go install {_MODULE}@{MINIO_MODULE_VERSION} failed ({done.returncode}): {last}")
    return binary


@dataclass
class MinioServer:
    """One MinIO server on ``127.0.0.1:port`` with root credentials, its data under ``data``."""

    binary: Path
    data: Path
    port: int
    root_user: str
    root_password: str
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, ready_s: float = 60.0) -> None:
        """Start it and wait (with a deadline) until it answers its liveness probe."""
        self.data.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.data),
            "MINIO_ROOT_USER": self.root_user,
            "MINIO_ROOT_PASSWORD": self.root_password,
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
        }
        log = (self.data.parent / f"minio-{self.port}.log").open("wb")
        argv = [str(self.binary), "server", str(self.data / "export"), "--address", self.endpoint, "--quiet"]
        self.process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PlatformError(f"MinIO exited at start ({self.process.returncode}); see {log.name}")
            try:
                with urllib.request.urlopen(f"http://{self.endpoint}/minio/health/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise PlatformError(f"MinIO did not become ready on {self.endpoint} within {ready_s:g} s")

    def stop(self) -> None:
        """Stop it by its pid (SIGTERM, then SIGKILL after a grace period)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=20)


def main() -> None:
    """``python -m infra.local.minio_server``: build the binary if missing (``make test`` does it beside the other
    builds, so the policy test does not spend its time limit compiling) and print its path."""
    from schemas.settings import Settings

    print(minio_binary(PlatformPaths(Settings().local.cache_dir)))


if __name__ == "__main__":
    main()

"""kubectl against the local cluster with the admin identity (the machine's kubectl: any 1.3x talks to it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from schemas.errors import PlatformError


class Kubectl:
    """Runs kubectl with one kubeconfig; JSON in, JSON out."""

    def __init__(self, kubeconfig: Path) -> None:
        binary = shutil.which("kubectl")
        if binary is None:
            raise PlatformError("kubectl not found: apt-get install kubectl (any version from 1.30 works)")
        self._argv = [binary, f"--kubeconfig={kubeconfig}", "--request-timeout=20s"]

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [*self._argv, *args], input=stdin, capture_output=True, text=True, check=False, timeout=120
        )
        if check and result.returncode != 0:
            raise PlatformError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def get(self, *args: str) -> Any:
        """``kubectl get ... -o json``, parsed (None when the object does not exist)."""
        result = subprocess.run(
            [*self._argv, "get", *args, "-o", "json"], capture_output=True, text=True, check=False, timeout=60
        )
        if result.returncode != 0:
            if "NotFound" in result.stderr or "not found" in result.stderr:
                return None
            raise PlatformError(f"kubectl get {' '.join(args)} failed: {result.stderr.strip()}")
        return json.loads(result.stdout)

    def apply(self, objects: list[dict[str, Any]], *, server_side: bool = False) -> None:
        manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        extra = ["--server-side", "--force-conflicts"] if server_side else []
        self.run("apply", *extra, "-f", "-", stdin=manifest)

    def apply_dir(self, directory: Path) -> None:
        """Server-side apply (KEDA's CRDs are too big for the client-side annotation)."""
        self.run("apply", "--server-side", "--force-conflicts", "-f", str(directory))


def wait_for(
    what: str,
    check: Callable[[], bool],
    timeout_s: float,
    interval_s: float = 0.5,
    *,
    alive: Callable[[], None] | None = None,
) -> float:
    """Poll ``check`` until it is true; return the seconds it took, or fail naming ``what`` after ``timeout_s``.
    ``alive`` raises when waiting is pointless (a process died): its error is not retried."""
    start = time.monotonic()
    deadline = start + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if alive is not None:
            alive()
        try:
            if check():
                return time.monotonic() - start
        except (PlatformError, OSError, subprocess.SubprocessError, ValueError) as exc:
            last_error = exc
        time.sleep(interval_s)
    detail = f" (last error: {last_error})" if last_error else ""
    raise PlatformError(f"timed out after {timeout_s:.0f}s waiting for {what}{detail}")

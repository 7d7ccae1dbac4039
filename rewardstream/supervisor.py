"""Keep one pipeline process running: restart it when it exits, stop it (and stay stopped) on SIGTERM.

Crash-only components (the reward processor exits with code 70 on a Kafka failure; any worker may die) are
safe to restart because every one of them resumes from committed Kafka offsets. In production a Kubernetes
Deployment or systemd does this; on one machine, ``rewardstream up --pipeline`` runs each process under this.
Usage: ``python -m rewardstream.supervisor NAME -- ARGV...``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from types import FrameType

MAX_BACKOFF_S = 30.0
HEALTHY_AFTER_S = 60.0


def supervise(name: str, argv: list[str]) -> int:
    """Run ``argv`` until SIGTERM/SIGINT; restart it with backoff whenever it exits on its own."""
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)  # the child may also get it from the process group: harmless twice

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    backoff = 1.0
    while not stopping:
        started = time.monotonic()
        child = subprocess.Popen(argv)
        code = child.wait()
        if stopping:
            return 0
        ran = time.monotonic() - started
        backoff = 1.0 if ran > HEALTHY_AFTER_S else min(backoff * 2, MAX_BACKOFF_S)
        print(
            f"supervisor: {name} exited with code {code} after {ran:.1f}s; restarting in {backoff:.0f}s",
            file=sys.stderr,
            flush=True,
        )
        deadline = time.monotonic() + backoff
        while not stopping and time.monotonic() < deadline:
            time.sleep(0.1)
    return 0


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m rewardstream.supervisor NAME -- ARGV...", file=sys.stderr)
        sys.exit(2)
    sys.exit(supervise(args[0], args[2:]))


if __name__ == "__main__":
    main()

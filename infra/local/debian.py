"""Install missing Debian packages the local platform needs (docker.io, bubblewrap, mmdebstrap)."""

from __future__ import annotations

import os
import shutil
import subprocess

from schemas.errors import PlatformError


def ensure_commands(packages: dict[str, str]) -> None:
    """Make sure each command exists, installing its Debian package (command -> package) when missing."""
    missing = sorted({pkg for cmd, pkg in packages.items() if shutil.which(cmd) is None})
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise PlatformError(
            f"missing Debian packages {', '.join(missing)}: install them (apt-get install {' '.join(missing)})"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]
    result = subprocess.run(install, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env, check=False)
        result = subprocess.run(install, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise PlatformError(f"apt-get install {' '.join(missing)} failed: {last}")

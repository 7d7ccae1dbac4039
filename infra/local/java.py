"""Find a Java runtime new enough for Kafka, OpenSearch and s3proxy."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from infra.local.versions import MIN_JAVA_MAJOR
from schemas.errors import PlatformError

_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


def find_java(java_home: Path | None) -> Path:
    """The ``java`` binary to use: RS_JAVA_HOME, then JAVA_HOME, then PATH; checked to be >= 17."""
    candidates: list[Path] = []
    if java_home is not None:
        candidates.append(java_home / "bin" / "java")
    if env_home := os.environ.get("JAVA_HOME"):
        candidates.append(Path(env_home) / "bin" / "java")
    if on_path := shutil.which("java"):
        candidates.append(Path(on_path))
    for java in candidates:
        if java.is_file() and _major_version(java) >= MIN_JAVA_MAJOR:
            return java
    raise PlatformError(
        f"Java {MIN_JAVA_MAJOR}+ not found (looked at RS_JAVA_HOME, JAVA_HOME, PATH): "
        f"install it (apt-get install openjdk-{MIN_JAVA_MAJOR}-jre-headless) or set RS_JAVA_HOME"
    )


def java_home_of(java: Path) -> Path:
    """JAVA_HOME for a ``java`` binary (resolving the Debian alternatives symlinks)."""
    return java.resolve().parent.parent


def _major_version(java: Path) -> int:
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30, check=False).stderr
    except (OSError, subprocess.TimeoutExpired):
        return 0
    match = _VERSION.search(out)
    if match is None:
        return 0
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major

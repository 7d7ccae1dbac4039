"""A tar of a few small text files, root's and executable: how the product puts its own scripts (and the
Dockerfile of a build step it adds) into a task's container or build context."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping


def script_tar(files: Mapping[str, str]) -> bytes:
    """An uncompressed tar of ``files`` (name -> text), each 0755 and owned by root."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()

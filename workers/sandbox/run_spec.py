"""What a run is handed besides its pipes: its spec (argv, environment, files, work dir caps, start marker) and
its stdin, each as a memfd. The fork server's and the entry server's supervisors read the same encoding."""

from __future__ import annotations

import json
import os

from guest.plumbing import write_all
from workers.sandbox.api import SandboxSpec
from workers.sandbox.common import base_env, check_relpath


def encode_spec(spec: SandboxSpec, marker: bytes) -> bytes:
    """The run description an in-sandbox supervisor reads (``boot_common.parse_spec``): a JSON header line, then
    the file bytes."""
    names = [(str(check_relpath(name)), data) for name, data in spec.files.items()]
    header = {
        "argv": list(spec.argv),
        "env": {**base_env(), **spec.env},
        "files": [[name, len(data)] for name, data in names],
        "size_mb": spec.workdir_size_mb,
        "inodes": spec.workdir_inodes,
        "marker": marker.decode(),
    }
    return json.dumps(header).encode() + b"\n" + b"".join(data for _, data in names)


def memfd(name: str, data: bytes) -> int:
    """A copy of ``data`` in a memfd (close-on-exec, at offset 0) to hand a run: its spec, its stdin."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        write_all(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd

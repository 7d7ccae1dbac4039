"""A process's instance id, ``[prefix-]host-pid-random``: what names its transactional producer and its
replies. Random per start, so a restarted process is a new instance (a zombie's writes are fenced, a reply meant
for the old one is ignored)."""

from __future__ import annotations

import os
import socket
import uuid

#: A hostname longer than this is cut: the id lands in Kafka transactional ids and event fields.
HOST_CHARS = 64


def new_instance_id(prefix: str = "") -> str:
    """A fresh id for this process, its hostname reduced to ``[A-Za-z0-9._-]``."""
    host = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in socket.gethostname())[:HOST_CHARS]
    return f"{prefix}{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"

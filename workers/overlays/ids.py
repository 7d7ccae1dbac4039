"""The host ids an image's files and an agent's processes have: the image's 0..65535 shifted to ``BASE``..,
so root in a step owns the image's files (it may ``pip install``, edit ``/etc``) and is nobody on the host."""

from __future__ import annotations

#: The host uid and gid of the image's root; far above any account and any other sandbox's ids.
BASE = 1_000_000_000
#: How many ids are mapped: the image's 0..65535.
SIZE = 65536
#: The id a file owned by an unmapped id gets (the kernel's overflow id).
NOBODY = 65534


def to_host(image_id: int) -> int:
    """The host id of an image's ``image_id`` (one outside the range becomes nobody's)."""
    return BASE + (image_id if 0 <= image_id < SIZE else NOBODY)


def to_image(host_id: int) -> int:
    """The image id of a host id (one outside the range, e.g. the host's root, becomes nobody's)."""
    return host_id - BASE if BASE <= host_id < BASE + SIZE else NOBODY

"""Which verdicts are audited, and on which backend.

Why a hash of the generation id and not a random draw: every auditor instance, a restart and a replay pick the
same generations, so the sample is a property of the data (a re-read verdict is audited again, the same way),
and a rate is exact over many ids without any coordination between instances.
"""

from __future__ import annotations

import hashlib

from schemas.backends import BACKENDS, Backend
from schemas.errors import ConfigError

#: The hash's first bytes, read as an integer in [0, 2**64): the sample is ``value < rate * 2**64``.
_BYTES = 8
_SPACE = 1 << (8 * _BYTES)


def fraction_of(generation_id: str) -> float:
    """Where a generation id falls in [0, 1): uniform over ids, the same in every process."""
    digest = hashlib.sha256(generation_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:_BYTES], "big") / _SPACE


def audited(generation_id: str, rate: float) -> bool:
    """Whether this generation's verdict is in the sample (``rate`` 0: none; 1: all)."""
    if not 0.0 <= rate <= 1.0:
        raise ConfigError(f"audit rate {rate} must be within [0, 1]")
    return fraction_of(generation_id) < rate


def other_backend(backend: str) -> Backend | None:
    """The backend an audit of a run on ``backend`` uses: the other one; None for a backend we do not know."""
    if backend not in BACKENDS:
        return None
    return next(b for b in BACKENDS if b != backend)

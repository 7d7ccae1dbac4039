"""The reward a Harbor verifier wrote: ``/logs/verifier/reward.json`` (``{"reward": float, ...}``) if it exists,
else ``reward.txt`` (one float), clamped to [0, 1].

Why each rule: ``reward.json`` wins, as in harbor 0.25; the value is clamped because a reward outside [0, 1]
means the same to a trainer as its bound; a file that is missing, empty, unparsable or not finite is a 0 with
the reason, because the tests ran the agent's code and decided (Harbor's rule); only what the host did (a
killed verifier, a failed build) is withheld, and that is decided before this is read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from schemas.caps import QUOTE_CHARS

JSON_FILE = "reward.json"
TEXT_FILE = "reward.txt"
#: Bytes of a reward file read; a longer one is not a reward.
MAX_REWARD_FILE_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class VerifierReward:
    """The reward, which file gave it (None: neither), the other numbers of a ``reward.json``, and why the
    reward is 0 or was clamped (None: taken as written)."""

    reward: float
    source: str | None
    reason: str | None = None
    values: Mapping[str, float] = field(default_factory=dict)


def read_reward(files: Mapping[str, bytes]) -> VerifierReward:
    """The reward in ``files`` (name -> bytes, as found in ``/logs/verifier``)."""
    if JSON_FILE in files:
        return _from_json(files[JSON_FILE])
    if TEXT_FILE in files:
        return _from_text(files[TEXT_FILE])
    return VerifierReward(0.0, None, f"the verifier wrote neither {JSON_FILE} nor {TEXT_FILE}")


def _zero(source: str, reason: str) -> VerifierReward:
    return VerifierReward(0.0, source, f"{source} {reason}")


def _quoted(data: bytes) -> str:
    return repr(data[:QUOTE_CHARS].decode("utf-8", "replace"))


def _clamped(value: float, source: str, values: Mapping[str, float]) -> VerifierReward:
    if not math.isfinite(value):
        return _zero(source, f"holds {value}, not a finite number")
    if 0.0 <= value <= 1.0:
        return VerifierReward(value, source, None, values)
    bound = min(1.0, max(0.0, value))
    return VerifierReward(bound, source, f"{source} holds {value}, clamped to {bound}", values)


def _from_text(data: bytes) -> VerifierReward:
    if len(data) > MAX_REWARD_FILE_BYTES:
        return _zero(TEXT_FILE, f"is over {MAX_REWARD_FILE_BYTES} bytes")
    if not data.strip():
        return _zero(TEXT_FILE, "is empty")
    try:
        value = float(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return _zero(TEXT_FILE, f"is not a number: {_quoted(data)}")
    return _clamped(value, TEXT_FILE, {})


def _number(value: object) -> float | None:
    """A JSON number as a float (orjson gives no integer beyond 64 bits); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _from_json(data: bytes) -> VerifierReward:  # noqa: PLR0911 - one return per rule
    if len(data) > MAX_REWARD_FILE_BYTES:
        return _zero(JSON_FILE, f"is over {MAX_REWARD_FILE_BYTES} bytes")
    if not data.strip():
        return _zero(JSON_FILE, "is empty")
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return _zero(JSON_FILE, f"is not JSON: {_quoted(data)}")
    if not isinstance(parsed, dict):
        return _zero(JSON_FILE, 'is not an object like {"reward": 1.0}')
    values: dict[str, float] = {}
    for key, raw in parsed.items():
        number = _number(raw)
        if number is None:
            return _zero(JSON_FILE, f"has {key!r}: {_quoted(orjson.dumps(raw))}, not a number")
        values[key] = number
    if "reward" in values:
        return _clamped(values["reward"], JSON_FILE, values)
    if len(values) == 1:  # Harbor's mean of a single key is that key's value
        return _clamped(next(iter(values.values())), JSON_FILE, values)
    return _zero(JSON_FILE, f'has no "reward" key (keys: {", ".join(sorted(values))[:QUOTE_CHARS]})')

"""The building blocks of the codec's property tests: ids, times, numbers, JSON values, the event envelope."""

from __future__ import annotations

import string
from datetime import UTC
from typing import Any

from hypothesis import strategies as st

ID_CHARS = string.ascii_letters + string.digits + "_.:-"
ids = st.text(ID_CHARS, min_size=1, max_size=24)
task_ids = st.builds(
    lambda head, tail: head + tail,
    st.sampled_from(string.ascii_letters + string.digits),
    st.text(ID_CHARS + "/", max_size=20),
)
short = st.text(min_size=1, max_size=20)
finite = st.floats(allow_nan=False, allow_infinity=False)
nonneg = st.floats(min_value=0, max_value=1e12, allow_nan=False)
unit = st.floats(min_value=0, max_value=1)
when = st.datetimes(timezones=st.just(UTC))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | finite | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
envelope: dict[str, Any] = {"schema_version": st.sampled_from(["1.0", "1.3"]), "event_id": ids, "created_at": when}
event: dict[str, Any] = {**envelope, "generation_id": ids, "episode_id": ids, "run_id": ids, "task_id": task_ids}

"""The S3 registry's keys, and the checks on every object read back from a bucket (fuzzed: an object can be
anything)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.codec import encode
from schemas.tasks import Task
from tests.unit.workers.tasks.test_registry import task
from workers.tasks.s3_layout import (
    CorruptObjectError,
    decode_full,
    decode_history,
    decode_pointer,
    decode_public,
    encode_history,
)

V1 = "a" * 64
V2 = "b" * 64


def full(task_id: str = "demo/1") -> Task:
    return Task.model_validate(task(task_id))


def test_pointer_and_history_round_trip() -> None:
    assert decode_pointer(V1.encode() + b"\n", "k") == V1
    assert decode_history(encode_history([V1, V2]), "k") == [V1, V2]
    for bad in (b"", b"zz", (V1 + "\n").encode() * 3):
        with pytest.raises(CorruptObjectError, match="is not a task version pointer"):
            decode_pointer(bad, "reg/public/latest/a")
    for bad in (b"", encode_history([V1, V1]), b"not hex\n"):
        with pytest.raises(CorruptObjectError, match="is not a task's version history"):
            decode_history(bad, "k")


def test_a_version_must_hold_its_own_bytes() -> None:
    one = full()
    data = encode(one)
    version = hashlib.sha256(data).hexdigest()
    assert decode_full(data, "k", version) == one
    assert decode_public(encode(one.public()), "k", version).task_version == version
    with pytest.raises(CorruptObjectError, match="does not hold version"):
        decode_full(data + b" ", "k", version)
    with pytest.raises(CorruptObjectError, match="is not the public view of version"):
        decode_public(encode(one.public()), "k", V1)
    not_a_task = b'{"task_id": 3}'
    with pytest.raises(CorruptObjectError, match="is not a task: ") as caught:
        decode_full(not_a_task, "reg/hidden/versions/a/x.json", hashlib.sha256(not_a_task).hexdigest())
    assert "\n" not in str(caught.value)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


def _bytes_or_json() -> st.SearchStrategy[bytes]:
    import json

    as_json = JSONISH.map(lambda value: json.dumps(value).encode())
    near_task = st.builds(
        lambda changes: json.dumps({**task("demo/1"), **changes}).encode(),
        st.dictionaries(st.sampled_from(sorted(task("x"))), JSONISH, max_size=3),
    )
    return st.binary(max_size=300) | as_json | near_task


@given(_bytes_or_json())
def test_corrupt_objects_raise_only_corrupt_object_error(data: bytes) -> None:
    """Whatever a bucket holds, a reader gets a value or CorruptObjectError, one line naming the key."""
    for decoder in (
        lambda: decode_pointer(data, "k"),
        lambda: decode_history(data, "k"),
        lambda: decode_public(data, "k", V1),
        lambda: decode_full(data, "k", hashlib.sha256(data).hexdigest()),  # past the digest: the decoder itself
    ):
        try:
            decoder()
        except CorruptObjectError as exc:
            message = str(exc)
        else:
            continue
        assert message.startswith("k ")
        assert "\n" not in message

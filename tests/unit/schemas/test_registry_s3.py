"""The S3 registry's keys (shared by the registry and the SDK that reads its pointers), and what a pointer's
bytes name."""

from __future__ import annotations

import pytest

from schemas.errors import ConfigError
from schemas.registry_s3 import RegistryLocation, pointer_version

V1 = "a" * 64


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [("s3://tasks", "tasks", ""), ("s3://tasks/", "tasks", ""), ("s3://tasks/a/b/", "tasks", "a/b")],
)
def test_urls_name_a_bucket_and_a_prefix(url: str, bucket: str, prefix: str) -> None:
    location = RegistryLocation.parse(url)
    assert (location.bucket, location.prefix) == (bucket, prefix)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("/srv/tasks", "is not an s3://bucket/prefix URL"),
        ("s3://", "is not an S3 bucket name"),
        ("s3://Tasks/x", "is not an S3 bucket name"),
        ("s3://ab/x", "is not an S3 bucket name"),
        ("s3://tasks/a//b", "empty, '.' or '..' part"),
        ("s3://tasks/a/../b", "empty, '.' or '..' part"),
    ],
)
def test_a_bad_url_is_one_line_naming_the_problem(url: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as caught:
        RegistryLocation.parse(url)
    assert "\n" not in str(caught.value)


def test_public_and_hidden_parts_are_separate_prefixes() -> None:
    location = RegistryLocation.parse("s3://tasks/reg")
    assert location.version_key("HumanEval/0", V1, hidden=False) == f"reg/public/versions/HumanEval%2F0/{V1}.json"
    assert location.version_key("HumanEval/0", V1, hidden=True) == f"reg/hidden/versions/HumanEval%2F0/{V1}.json"
    assert location.latest_key("HumanEval/0").startswith(location.part_prefix(hidden=False))
    assert location.history_key("HumanEval/0").startswith(location.part_prefix(hidden=False))
    assert location.part_prefix(hidden=True) == "reg/hidden/"
    assert RegistryLocation.parse("s3://tasks").latest_key("a") == "public/latest/a"


def test_listed_pointer_keys_name_their_task() -> None:
    location = RegistryLocation.parse("s3://tasks/reg")
    assert location.task_id_of(location.latest_key("HumanEval/0")) == "HumanEval/0"
    assert location.task_id_of("reg/public/latest/") is None
    assert location.task_id_of("elsewhere/x") is None
    assert location.task_id_of("reg/public/latest/a/b") is None


def test_a_pointer_names_a_version_or_none() -> None:
    assert pointer_version(b"a" * 64 + b"\n") == "a" * 64
    for data in (b"", b"A" * 64, b"a" * 63, b"latest", b"a" * 64 + b" " * 100):
        assert pointer_version(data) is None, data

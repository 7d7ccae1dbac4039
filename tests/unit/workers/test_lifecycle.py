"""The artifacts bucket's rule as data: one prefix (``sha256/``) with the configured days, and the refresh age
content-addressed writers use (the rule applied to real S3 servers: tests/integration/test_artifact_lifecycle.py)."""

from __future__ import annotations

import math

from schemas.content import EXPIRY_RULE_ID, KEY_PREFIX, content_key, refresh_after_s
from workers.lifecycle import LifecycleOutcome, expiry_rule


def test_the_rule_expires_only_content_addressed_keys() -> None:
    rule = expiry_rule(45)
    assert rule.rule_id == EXPIRY_RULE_ID
    assert rule.rule_filter.prefix == f"{KEY_PREFIX}/"
    assert rule.expiration.days == 45
    assert content_key("ab" * 32).startswith(rule.rule_filter.prefix), "every content key is under the rule"
    for never in ("public/latest/t1", "hidden/versions/t1/v.json", "reg/public/latest/t1", "swe/calc-1.tar.gz"):
        assert not never.startswith(rule.rule_filter.prefix), never


def test_an_object_is_refreshed_once_it_is_half_way_to_expiry() -> None:
    assert refresh_after_s(0) == math.inf, "no expiry: never refreshed"
    assert refresh_after_s(10) == 5 * 86_400


def test_only_a_rule_in_place_or_rightly_absent_is_ok() -> None:
    assert LifecycleOutcome("unchanged", "").ok
    assert LifecycleOutcome("absent", "").ok
    assert not LifecycleOutcome("unsupported", "").ok
    assert not LifecycleOutcome("denied", "").ok

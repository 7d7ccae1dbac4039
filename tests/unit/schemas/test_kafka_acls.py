"""The ACL table is derived from the catalog: each principal gets what its role needs and nothing that would let
a trainer see hidden-test verdicts or forge a reward."""

from __future__ import annotations

import pytest

from schemas.kafka_acls import ADMIN, acl_table, markdown_table, principals, trainer_names
from schemas.topics import catalog


def _rights(principal: str, prefix: str = "rs.") -> set[tuple[str, str, str]]:
    return {(g.operation, g.resource, g.name) for g in acl_table(prefix, ("trainer",)) if g.principal == principal}


def test_a_trainer_writes_generations_reads_rewards_and_nothing_of_the_graders() -> None:
    rights = _rights("trainer")
    assert ("write", "topic", "rs.generations") in rights
    assert ("read", "topic", "rs.rewards") in rights
    assert ("read", "topic", "rs.verdicts") not in rights
    assert ("write", "topic", "rs.rewards") not in rights
    assert not any(name in {"rs.executions", "rs.verdicts", "rs.judgements"} for _op, _kind, name in rights)


def test_each_writer_role_writes_its_own_signal_only() -> None:
    for role, own in (("executor", "rs.executions"), ("verifier", "rs.verdicts"), ("judge", "rs.judgements")):
        writes = {name for op, kind, name in _rights(role) if op == "write" and kind == "topic"}
        assert own in writes
        assert not writes & ({"rs.executions", "rs.verdicts", "rs.judgements", "rs.rewards"} - {own})
        assert ("read", "group", f"rs.{role}") in _rights(role)
        assert ("write", "transactional_id", f"rs.{role}.") in _rights(role)


def test_every_topic_named_is_in_the_catalog_of_its_prefix() -> None:
    names = {spec.name for spec in catalog("team-a.")}
    for grant in acl_table("team-a.", ("t1",)):
        if grant.resource == "topic" and grant.pattern == "literal":
            assert grant.name in names, grant


def test_trainer_names_are_checked() -> None:
    assert trainer_names(" a, b ,a") == ("a", "b")
    assert ADMIN in principals(("a",))
    for bad in ("admin", "executor", "a b", "x:y"):
        with pytest.raises(ValueError, match="RS_KAFKA_TRAINERS"):
            trainer_names(bad)


def test_the_docs_print_the_table() -> None:
    from pathlib import Path

    docs = (Path(__file__).parents[3] / "docs" / "operations.md").read_text()
    assert markdown_table("rs.", ("trainer",)) in docs

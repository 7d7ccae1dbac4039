"""The ACL table is derived from the catalog: each principal gets what its role needs and nothing that would let
a trainer see hidden-test verdicts or forge a reward."""

from __future__ import annotations

import pytest

from schemas.kafka_acls import ADMIN, ROLES, acl_table, markdown_table, principals, trainer_names
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


def test_only_the_reward_processor_writes_rewards_and_only_graders_read_hidden_results() -> None:
    hidden = {"rs.verdicts", "rs.judgements", "rs.executions"}
    for principal in (*ROLES, "trainer"):
        rights = _rights(principal)
        if principal != "rewards":
            assert ("write", "topic", "rs.rewards") not in rights, principal
        if principal not in ("rewards", "auditor", "operator"):
            assert not any(op == "read" and name in hidden for op, _kind, name in rights), principal


def test_the_reward_processor_may_check_its_writers_liveness_without_reading_their_input() -> None:
    rights = _rights("rewards")
    assert ("describe", "topic", "rs.generations") in rights
    assert ("read", "topic", "rs.generations") not in rights
    for writer in ("executor", "verifier", "judge"):
        assert ("describe", "group", f"rs.{writer}") in rights
        assert ("read", "group", f"rs.{writer}") not in rights
    assert ("write", "transactional_id", "rs.rewards-") in rights
    assert ("create", "topic", "rs.rewards-") in rights  # its changelog


def test_the_other_roles_get_their_own_topics_and_group() -> None:
    episode = _rights("episode")
    assert {("read", "topic", "rs.actions"), ("write", "topic", "rs.observations"),
            ("write", "topic", "rs.generations"), ("read", "group", "rs.episode"),
            ("create", "topic", "rs.episode-")} <= episode  # fmt: skip
    assert ("read", "topic", "rs.verdicts") in _rights("auditor")
    assert ("write", "topic", "rs.audits") in _rights("auditor")
    indexer = _rights("indexer")
    assert {("read", "topic", "rs.logs"), ("read", "topic", "rs.dlq"), ("read", "group", "rs.indexer")} <= indexer
    assert {op for op, kind, _name in indexer if kind == "transactional_id"} == set()
    gateway = _rights("gateway")
    assert {("write", "topic", "rs.generations"), ("write", "topic", "rs.run_requests"),
            ("read", "topic", "rs.rewards"), ("read", "topic", "rs.run_replies")} <= gateway  # fmt: skip


def test_the_operator_reads_every_live_topic_and_writes_only_its_replay_namespaces() -> None:
    rights = _rights("operator")
    for spec in catalog("rs."):
        assert ("read", "topic", spec.name) in rights
        assert ("write", "topic", spec.name) not in rights
    assert {("create", "topic", "rs.replay."), ("delete", "topic", "rs.replay."), ("delete", "group", "rs.replay."),
            ("write", "transactional_id", "rs.replay.")} <= rights  # fmt: skip


def test_no_prefixed_grant_reaches_another_roles_names() -> None:
    """A role's ``<name>*`` may not cover a name another role owns (its changelog, its groups)."""
    table = acl_table("rs.", ("trainer",))
    prefixed = {(g.resource, g.name, g.principal) for g in table if g.pattern == "prefixed"}
    for resource, prefix, owner in prefixed:
        for grant in table:
            if grant.resource == resource and grant.principal not in (owner, "trainer"):
                assert not grant.name.startswith(prefix), (prefix, owner, grant)


def test_every_topic_named_is_in_the_catalog_of_its_prefix() -> None:
    names = {spec.name for spec in catalog("team-a.")}
    for grant in acl_table("team-a.", ("t1",)):
        if grant.resource == "topic" and grant.pattern == "literal":
            assert grant.name in names, grant


def test_trainer_names_are_checked() -> None:
    assert trainer_names(" a, b ,a") == ("a", "b")
    assert ADMIN in principals(("a",))
    for bad in ("admin", "executor", "gateway", "operator", "a b", "x:y"):
        with pytest.raises(ValueError, match="RS_KAFKA_TRAINERS"):
            trainer_names(bad)


def test_the_docs_print_the_table() -> None:
    from pathlib import Path

    docs = (Path(__file__).parents[3] / "docs" / "operations.md").read_text()
    assert markdown_table("rs.", ("trainer",)) in docs

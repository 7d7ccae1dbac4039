"""Which reads cover ``docker diff``'s list (the reads themselves: tests/sandbox/test_image_steps.py)."""

from __future__ import annotations

from workers.containers.changes import plan

MODIFIED, ADDED, DELETED = 0, 1, 2


def test_added_trees_are_read_whole_and_changed_directories_not_at_all() -> None:
    diff = [
        {"Path": "/opt", "Kind": MODIFIED},
        {"Path": "/opt/x", "Kind": ADDED},
        {"Path": "/opt/x/f", "Kind": ADDED},
        {"Path": "/opt/x/g", "Kind": ADDED},
        {"Path": "/etc", "Kind": MODIFIED},
        {"Path": "/etc/motd", "Kind": MODIFIED},
        {"Path": "/srv", "Kind": MODIFIED},
        {"Path": "/usr/share/doc/a", "Kind": DELETED},
        {"Path": "/usr/share/doc/a/copyright", "Kind": DELETED},
    ]
    got = plan(diff)
    assert got.subtrees == ("/opt/x",)
    assert got.singles == ("/etc/motd", "/srv")  # /srv: a change with nothing below (a file, or a chmod'ed dir)
    assert set(got.deleted) == {"/usr/share/doc/a", "/usr/share/doc/a/copyright"}


def test_what_docker_mounts_is_never_the_agents() -> None:
    diff = [
        {"Path": "/usr", "Kind": MODIFIED},
        {"Path": "/usr/sbin", "Kind": MODIFIED},
        {"Path": "/usr/sbin/docker-init", "Kind": ADDED},
        {"Path": "/etc/hosts", "Kind": MODIFIED},
        {"Path": "/proc/self", "Kind": ADDED},
    ]
    assert plan(diff).subtrees == ()
    assert plan(diff).singles == ()
    assert plan(diff).deleted == ()


def test_a_malformed_listing_is_skipped_not_raised() -> None:
    diff: list[dict[str, object]] = [{"Path": None, "Kind": ADDED}, {"Path": "/a", "Kind": "x"}, {}]
    assert plan(diff).subtrees == ()

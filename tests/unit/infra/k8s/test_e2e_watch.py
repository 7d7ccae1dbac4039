"""Which executor pods count as ready, and which one the e2e kills."""

from __future__ import annotations

from typing import Any

from infra.k8s.e2e_watch import pod_to_kill, ready_pods


def _pod(name: str, created: str, ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-04T20:00:09Z"
    status = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return {"metadata": metadata, "status": status}


def test_ready_pods_leave_out_unready_and_terminating_ones() -> None:
    pods = {"items": [_pod("a", "2026-12-04T20:00:01Z"), _pod("b", "2026-12-04T20:00:02Z", ready=False),
                      _pod("c", "2026-12-04T20:00:03Z", deleting=True), {"metadata": {"name": "d"}}]}  # fmt: skip
    assert [p["metadata"]["name"] for p in ready_pods(pods)] == ["a"]


def test_the_oldest_ready_pod_is_killed() -> None:
    pods = {"items": [_pod("new", "2026-12-04T20:00:05Z"), _pod("old", "2026-12-04T20:00:01Z"),
                      _pod("older-but-going", "2026-12-04T20:00:00Z", deleting=True)]}  # fmt: skip
    assert pod_to_kill(pods) == "old"
    assert pod_to_kill({"items": []}) is None

"""Waiting on the cluster: a dead process ends the wait at once; a condition never met names what was awaited."""

from __future__ import annotations

import pytest

from infra.k8s.kubectl import wait_for
from schemas.errors import PlatformError


def test_a_dead_component_is_not_waited_for() -> None:
    calls: list[int] = []

    def died() -> None:
        raise PlatformError("kubelet exited")

    def check() -> bool:
        calls.append(1)
        return False

    with pytest.raises(PlatformError, match="kubelet exited"):
        wait_for("the node", check, 600, alive=died)
    assert calls == []


def test_a_condition_never_met_names_it_and_the_last_error() -> None:
    def failing() -> bool:
        raise PlatformError("connection refused")

    with pytest.raises(PlatformError, match=r"waiting for the apiserver \(last error: connection refused\)"):
        wait_for("the apiserver", failing, 0.05, interval_s=0.01)


def test_a_met_condition_returns() -> None:
    answers = iter([False, False, True])
    assert wait_for("the third try", lambda: next(answers), 60, interval_s=0.001) >= 0

"""The soak's arithmetic: the mix in its proportion, slopes per hour, and a leak told from a one-time step (a
leak grows in both halves of the fitted window; a lazy start, such as the auditor's first audit opening its
other backend, in one)."""

from __future__ import annotations

import itertools
import os
from collections import Counter
from typing import Any

import pytest

from benchmarks.soak import arguments, growing, slopes
from benchmarks.soak_load import MIX, mix_cycle
from benchmarks.soak_probe import ProcessProbe, slope_per_hour


def test_the_mix_cycle_keeps_the_proportion_and_interleaves() -> None:
    one_round = list(itertools.islice(mix_cycle(), sum(MIX.values())))
    assert Counter(one_round) == Counter(MIX)
    assert one_round[:5].count("generation") < 5  # not all generations first


def test_slope_per_hour() -> None:
    assert slope_per_hour([0, 1800, 3600], [10.0, 35.0, 60.0]) == pytest.approx(50.0)
    assert slope_per_hour([0, 10], [0.0, 9.0]) == 0.0  # too few points to fit


def _rows(series: list[float]) -> list[dict[str, Any]]:
    return [{"t_s": 10.0 * i, "rss_mb_w": 80.0, "fds_w": v} for i, v in enumerate(series)]


def test_a_steady_leak_fails_and_a_one_time_step_does_not() -> None:
    probe = [ProcessProbe("w", os.getpid(), None)]
    leak = slopes(_rows([20 + 0.1 * i for i in range(60)]), probe, 0)["w"]  # 36 fds an hour
    step = slopes(_rows([20.0] * 20 + [40.0] * 40), probe, 0)["w"]
    assert growing(leak, "fds", 20)
    assert step["fds_per_h"] > 20  # least squares alone would call it a leak
    assert not growing(step, "fds", 20)
    assert not growing(leak, "rss_mb", 1)


def test_the_warm_up_must_leave_something_to_fit() -> None:
    assert arguments(["--minutes", "30"]).warmup_minutes == 5
    assert arguments(["--minutes", "3"]).warmup_minutes == 1
    with pytest.raises(SystemExit):
        arguments(["--minutes", "1", "--warmup-minutes", "2"])

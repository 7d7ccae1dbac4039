"""The metric names read from PromQL text: selectors only, never functions, labels, keywords or numbers."""

from __future__ import annotations

import pytest

from infra.monitoring.promql import metric_names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up", {"up"}),
        ('sum by (role) (up{job="rewardstream"})', {"up"}),
        ("sum(rate(a_total[5m])) by (le)", {"a_total"}),
        ('histogram_quantile(0.99, sum by (le) (rate(x_bucket{job="j", role!="i"}[$__rate_interval])))',
         {"x_bucket"}),
        ("role:rewardstream_reward_seconds:p99_5m > 120", {"role:rewardstream_reward_seconds:p99_5m"}),
        ('a{l="sum(b)"} / on (role) group_left (x) c offset 5m', {"a", "c"}),
        ("a unless b or c and bool d", {"a", "b", "c", "d"}),
        ("topk(5, a) * 1e3 + 0x1f - Inf", {"a"}),
        ('label_replace(absent(up{job="x"}), "role", "all", "", "")', {"up"}),
        ("max_over_time(a[1h:5m]) @ start()", {"a"}),
        ('count by (alertname) (ALERTS{alertstate="firing"})', {"ALERTS"}),
        ("sum without (instance) (a)", {"a"}),
    ],
)  # fmt: skip
def test_names_of_an_expression(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names

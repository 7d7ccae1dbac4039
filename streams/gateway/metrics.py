"""The gateway's Prometheus metrics, on its own ``/metrics`` (same port as the API, no token needed).

Routes are labelled by their template (``/v1/rewards/{generation_id}``), never by the raw path, so a client
cannot grow the label set; anything else is ``other``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

ROUTES = ("/run_code", "/v1/rewards", "/get_reward", "/health", "/metrics", "/openapi.json", "/docs", "/redoc")
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


def route_of(path: str) -> str:
    """The route template a path belongs to (bounded label values)."""
    if path.startswith("/v1/rewards/"):
        return "/v1/rewards/{generation_id}"
    return path if path in ROUTES else "other"


class GatewayMetrics:
    """Requests by route and status, their latency, what is in flight, and what the runs and rewards did."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "rewardstream_gateway_requests", "HTTP requests answered, by route and status code", ("route", "status"),
            registry=self.registry,
        )  # fmt: skip
        self.seconds = Histogram(
            "rewardstream_gateway_request_seconds", "Time to answer a request, by route", ("route",),
            buckets=_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.in_flight = Gauge(
            "rewardstream_gateway_in_flight", "Requests being answered", registry=self.registry
        )  # fmt: skip
        self.body_reads = Gauge(
            "rewardstream_gateway_body_reads", "Requests whose bodies are still arriving (every peer's)",
            registry=self.registry,
        )  # fmt: skip
        self.runs = Counter(
            "rewardstream_gateway_runs", "/run_code answers, by SandboxFusion status (and timeout, unavailable)",
            ("status",), registry=self.registry,
        )  # fmt: skip
        self.rewards = Counter(
            "rewardstream_gateway_generations", "Generations published through the gateway, by route",
            ("route",), registry=self.registry,
        )  # fmt: skip

    def observe(self, path: str, status: int, seconds: float) -> None:
        route = route_of(path)
        self.requests.labels(route, str(status)).inc()
        self.seconds.labels(route).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

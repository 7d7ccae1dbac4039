"""Wire an indexer process from Settings: N consumers in one group, one OpenSearch client, one /metrics.

Kept apart from ``indexer.py`` so tests and other tools can build a ``LogIndexer`` with their own clients.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from bus.clients import make_consumer, make_producer
from bus.crash_guard import AloneGate
from bus.metrics import WorkerMetrics
from schemas.settings import Settings
from schemas.topics import catalog_for, group_for, topic_for
from workers.logs.indexer import IndexerConfig, LogIndexer
from workers.logs.indices import LogIndices

log = logging.getLogger(__name__)


def opensearch_client(settings: Settings, timeout_s: float = 10.0) -> Any:
    """An OpenSearch client that fails fast (the indexer does its own retrying, with backoff)."""
    from opensearchpy import OpenSearch

    auth = None
    if settings.opensearch.username and settings.opensearch.password is not None:
        auth = (settings.opensearch.username, settings.opensearch.password.get_secret_value())
    return OpenSearch(
        hosts=[settings.opensearch.url],
        http_auth=auth,
        verify_certs=settings.opensearch.verify_certs,
        timeout=timeout_s,
        max_retries=0,
        retry_on_timeout=False,
        http_compress=True,
    )


def indexer_config(settings: Settings, **overrides: Any) -> IndexerConfig:
    """The indexer's topics, group and index prefix from Settings (the topic catalog names the topics)."""
    specs = catalog_for(settings)
    values: dict[str, Any] = {
        "logs_topic": topic_for("logs", specs).name,
        "dlq_topic": topic_for("dlq", specs).name,
        "group_id": group_for(settings, "indexer"),
        "index_prefix": settings.opensearch.index_prefix,
        "batch_size": settings.opensearch.indexer_batch_size,
        **overrides,
    }
    return IndexerConfig(**values)


def run_indexers(
    settings: Settings,
    stop: threading.Event,
    *,
    concurrency: int = 1,
    metrics: WorkerMetrics,
    config: IndexerConfig | None = None,
    client: Any | None = None,
) -> None:
    """Run ``concurrency`` indexer consumers until ``stop`` is set; the first failure stops them all."""
    config = config or indexer_config(settings)
    owned_client = client is None
    client = client if client is not None else opensearch_client(settings)
    kafka = settings.kafka_client_config()
    producer = make_producer(kafka)
    indices = LogIndices(
        client,
        config.index_prefix,
        replicas=settings.opensearch.replicas,
        retention_days=settings.opensearch.log_retention_days,
        max_bytes=int(settings.opensearch.log_retention_gb * 1024**3),
    )
    errors: list[BaseException] = []
    threads: list[threading.Thread] = []
    gate = AloneGate()  # the crash guard's: a suspect record is indexed with the process to itself
    try:
        _install_with_retry(indices, stop)
        for n in range(concurrency):
            # Only the first consumer applies retention; the others would just repeat it.
            own = config if n == 0 else _replace(config, retention_every_s=float("inf"))
            indexer = LogIndexer(
                own, consumer=make_consumer(kafka, own.group_id), producer=producer, client=client,
                indices=indices, metrics=metrics, stop=stop, gate=gate, crash_attempts=settings.worker.crash_attempts,
            )  # fmt: skip
            thread = threading.Thread(target=_guard, args=(indexer, stop, errors), name=f"indexer-{n}", daemon=True)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        producer.flush(30)
        if owned_client:
            client.close()
    if errors:
        raise errors[0]


def _replace(config: IndexerConfig, **changes: Any) -> IndexerConfig:
    from dataclasses import replace

    return replace(config, **changes)


def _guard(indexer: LogIndexer, stop: threading.Event, errors: list[BaseException]) -> None:
    try:
        indexer.run()
    except BaseException as exc:
        errors.append(exc)
        stop.set()


def _install_with_retry(indices: LogIndices, stop: threading.Event) -> None:
    """The template must exist before the first record is indexed; wait for OpenSearch if it is down."""
    from workers.logs.indexer import Backoff

    backoff = Backoff(0.5, 10.0)
    while not stop.is_set():
        try:
            indices.install()
        except Exception as exc:
            log.warning("OpenSearch not ready for the log template, will retry: %s", exc)
            stop.wait(backoff.next_delay())
            continue
        log.info("log template installed (ISM retention policy: %s)", "yes" if indices.ism_enabled else "no")
        return

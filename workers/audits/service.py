"""Wire one auditor from Settings: ``rs.verdicts`` in (its own consumer group), ``rs.audits`` out, a sandbox of
each backend this host has, the transactional loop.

Why both backends in one auditor: a verdict names the backend that ran it, and its audit runs on the other, so
one auditor serves verifiers of either kind. A backend this host cannot start (no docker daemon, no rootfs) is
logged and left out: its verdicts' audits are counted as skipped (``backend_unavailable``), never guessed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager

from bus.metrics import WorkerMetrics
from schemas.backends import BACKENDS
from schemas.errors import SandboxError
from schemas.events import HiddenVerdict
from schemas.settings import Settings
from schemas.topics import catalog_for, topic_for
from workers.audits.auditor import AuditContext, AuditHandler
from workers.audits.metrics import AuditMetrics
from workers.grading import Grader
from workers.logs.shipper import worker_name
from workers.roles.common import TaskSource
from workers.roles.service import Dependencies, artifact_store, loop_clients, loop_config
from workers.sandbox.api import Sandbox
from workers.tasks.reader import registry_from_settings
from workers.transactional_loop import TransactionalWorker

ROLE = "auditor"
_log = logging.getLogger("rewardstream.worker.auditor")


def _sandboxes(settings: Settings, stack: ExitStack) -> dict[str, Sandbox]:
    """Every backend this host can start, each closed with ``stack``."""
    from workers.sandbox.factory import make_sandbox

    found: dict[str, Sandbox] = {}
    for backend in BACKENDS:
        try:
            sandbox = make_sandbox(settings, backend)
        except SandboxError as exc:
            _log.warning("auditor: no %s backend here, its audits are skipped: %s", backend, exc)
            continue
        stack.callback(sandbox.close)
        found[backend] = sandbox
    return found


@contextmanager
def build_auditor(
    settings: Settings,
    stop: threading.Event,
    metrics: WorkerMetrics,
    deps: Dependencies | None = None,
    *,
    sandboxes: Mapping[str, Sandbox] | None = None,
    concurrency: int | None = None,
) -> Iterator[TransactionalWorker[HiddenVerdict]]:
    """A ready auditor (``with ... as worker: worker.run()``); ``sandboxes``: by backend name (tests), else
    every backend this host can start."""
    deps = deps or Dependencies()
    config = loop_config(settings, ROLE, "verdicts", concurrency=concurrency)
    with ExitStack() as stack:
        store = deps.artifacts
        if store is None and settings.worker.store_artifacts:
            store = artifact_store(settings, stop, metrics)
        chosen = sandboxes if sandboxes is not None else _sandboxes(settings, stack)
        context = AuditContext(
            worker=worker_name(),
            tasks=TaskSource(deps.registry or registry_from_settings(settings)),
            artifacts=store,
            graders={name: Grader(sandbox) for name, sandbox in chosen.items()},
            output_topic=topic_for("audits", catalog_for(settings)).name,
            rate=settings.worker.audit_rate,
            metrics=AuditMetrics(metrics.registry),
        )
        clients = loop_clients(settings, config, context.worker)
        yield TransactionalWorker(config, AuditHandler(context), consumer=clients.consumer, producer=clients.producer,
                                  metrics=metrics, stop=stop, shipper=clients.shipper, model=HiddenVerdict,
                                  renew=clients.renew)  # fmt: skip


def run_auditor(settings: Settings, stop: threading.Event, metrics: WorkerMetrics) -> None:
    """Build and run one auditor until ``stop``; cleanup in every case."""
    with build_auditor(settings, stop, metrics) as worker:
        worker.run()

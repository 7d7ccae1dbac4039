"""The runner threads of a transactional worker loop: each runs the role's handler on one item at a time.

Why apart from the loop: only the loop thread touches partition state and Kafka; a runner only turns an item
into an outcome (or the exception it raised) and hands it back, so nothing here needs a lock (a runner only
reads an item's partition flags, ``live`` and ``closing``; one read just before the loop sets them runs an
item the loop then discards or waits for, as if it had started a moment earlier).
"""

from __future__ import annotations

import threading
from queue import Empty, SimpleQueue
from typing import Generic, TypeVar, cast

from bus.metrics import WorkerMetrics
from schemas.codec import Contract
from workers.handler import Done, Handler, InvalidEventError, Outcome, Reject, Source
from workers.in_flight import Item, timestamp_ms

#: What a runner reports for an item it was handed but did not start: the worker is draining, or the item's
#: partition is being (or was) revoked.
NOT_STARTED = Done(())

E = TypeVar("E", bound=Contract)


class Runners(Generic[E]):
    """``concurrency`` threads running ``handler``; ``draining`` (set by the loop) leaves new items unstarted."""

    def __init__(self, role: str, concurrency: int, handler: Handler[E], metrics: WorkerMetrics) -> None:
        self.role = role
        self.concurrency = concurrency
        self.handler = handler
        self.metrics = metrics
        self.draining = False
        self._work: SimpleQueue[Item | None] = SimpleQueue()
        self._done: SimpleQueue[tuple[Item, Outcome | BaseException]] = SimpleQueue()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for n in range(self.concurrency):
            thread = threading.Thread(target=self._runner, name=f"{self.role}-run-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Ask every thread to end, and wait a moment for each (a run still going is abandoned, uncommitted)."""
        for _ in self._threads:
            self._work.put(None)
        for thread in self._threads:
            thread.join(timeout=1.0)

    def hand(self, item: Item) -> None:
        """Give ``item`` to the next free runner."""
        self._work.put(item)

    def finished(self, wait_s: float = 0.0) -> tuple[Item, Outcome | BaseException] | None:
        """A finished run, if there is one within ``wait_s`` (0: never waits)."""
        try:
            return self._done.get(timeout=wait_s) if wait_s > 0 else self._done.get_nowait()
        except Empty:
            return None

    def _runner(self) -> None:
        """Runner thread: handle items one at a time; outcomes (or the exception) go back to the loop."""
        while True:
            item = self._work.get()
            if item is None:
                return
            event = item.event
            part = item.part
            # Handed over but not started, and the worker stops or the partition is (being) given up: leave it
            # uncommitted (re-delivered to whoever owns the partition next).
            if self.draining or part.closing or not part.live:
                self._done.put((item, NOT_STARTED))
                continue
            try:
                if event is None:  # never queued without an event; defensive
                    raise InvalidEventError("no event")
                source = Source(item.part.topic, item.part.partition, item.offset, timestamp_ms(item.msg),
                                item.part.epoch)  # fmt: skip
                with self.metrics.in_flight():
                    outcome: Outcome | BaseException = self.handler.handle(cast("E", event), source)
            except InvalidEventError as exc:  # retrying cannot fix the event: dead-letter it now
                outcome = Reject(exc)
            except Exception as exc:  # one message's failure is that message's: retried, then dead-lettered
                outcome = exc
            self._done.put((item, outcome))

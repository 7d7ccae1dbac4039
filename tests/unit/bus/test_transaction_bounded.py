"""A transactional call that hangs past its timeout makes its producer count as hung (fatal), instead of
hanging the worker with it, as librdkafka's send_offsets_to_transaction did under a killed broker."""

from __future__ import annotations

import threading

import pytest

import bus.transaction
from bus.errors import KafkaClientError
from bus.transaction import bounded


def test_a_call_that_returns_in_time_passes_its_result_and_its_error_through() -> None:
    bounded("commit transaction", lambda: None, 1.0)
    with pytest.raises(ValueError, match="refused"):
        bounded("commit transaction", lambda: (_ for _ in ()).throw(ValueError("refused")), 1.0)


def test_a_call_hung_past_its_timeout_is_a_fatal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bus.transaction, "HUNG_GRACE_S", 0.05)
    release = threading.Event()

    def hangs() -> None:
        release.wait(10)

    with pytest.raises(KafkaClientError, match="hung past its") as caught:
        bounded("commit transaction", hangs, 0.05)
    release.set()
    assert caught.value.fatal

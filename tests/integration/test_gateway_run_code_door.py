"""The ``/run_code`` door: tokens, caps, limits, stalled bodies, lone surrogates, Kafka down and a schema fuzz."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import requests
import sandbox_fusion
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.result import Ok

from tests.integration.gateway_env import Stack, StalledClient, free_port, metric
from tests.integration.gateway_run_code_env import run
from tests.integration.reward_env import REPO
from tests.unit.lone_surrogates import with_a_lone_surrogate

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

TOKEN = "test-token-" + "x" * 16


def test_the_door_tokens_caps_and_the_per_token_limit(runs: Stack) -> None:
    guarded = runs.gateway(
        "guarded", gateway_tokens=f"{TOKEN},other-token-{'y' * 16}", gateway_token_concurrency="2",  # noqa: S106
        gateway_max_body_bytes="4096",
    )  # fmt: skip
    body = {"language": "python", "code": "print(1)"}
    none = requests.post(f"{guarded.url}/run_code", json=body, timeout=60)
    assert none.status_code == 401
    assert none.headers["www-authenticate"].startswith("Bearer")
    assert "bearer token" in none.json()["detail"]
    wrong = requests.post(f"{guarded.url}/run_code", json=body, headers=_auth("not-the-token-at-all"), timeout=60)
    assert wrong.status_code == 403
    ok = requests.post(f"{guarded.url}/run_code", json=body, headers=_auth(TOKEN), timeout=60)
    assert ok.status_code == 200
    assert ok.json()["run_result"]["stdout"] == "1\n"
    for path in ("/health", "/openapi.json"):  # open: probes and the schema
        assert requests.get(f"{guarded.url}{path}", timeout=10).status_code == 200

    big = {"language": "python", "code": "#" * 5000}
    assert requests.post(f"{guarded.url}/run_code", json=big, headers=_auth(TOKEN), timeout=60).status_code == 413
    chunks = (part for part in (b'{"language": "python", "code": "', b"#" * 5000, b'"}'))
    chunked = requests.post(f"{guarded.url}/run_code", data=chunks, headers=_auth(TOKEN), timeout=60)
    assert chunked.status_code == 413
    assert "cap" in chunked.json()["detail"]

    statuses: list[int] = []
    slow = {"language": "python", "code": "import time; time.sleep(3)", "run_timeout": 20}

    def call() -> None:
        statuses.append(
            requests.post(f"{guarded.url}/run_code", json=slow, headers=_auth(TOKEN), timeout=120).status_code
        )

    threads = [threading.Thread(target=call) for _ in range(3)]
    for thread in threads:
        thread.start()
        time.sleep(0.3)  # the first two are in flight when the third comes
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200, 200, 429], statuses
    # the limit is per token: another token is not held back by the first one's runs
    other = requests.post(f"{guarded.url}/run_code", json=body, headers=_auth("other-token-" + "y" * 16), timeout=60)
    assert other.status_code == 200


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_stalled_bodies_hold_no_slot_and_are_408_at_the_deadline(runs: Stack) -> None:
    """Issue 24: on the tokenless loopback bind every client shares one ``anonymous`` limit; four clients that
    send headers and stall their body used to hold its slots (429 for everyone, for as long as they liked)."""
    gateway = runs.gateway("stalls", gateway_token_concurrency="2", gateway_body_timeout_s="3")  # noqa: S106
    stalled = [StalledClient(gateway.url) for _ in range(4)]
    try:
        _wait_for(lambda: metric(gateway.url, "rewardstream_gateway_body_reads") == 4, "4 bodies arriving")
        asked_after = time.monotonic() - stalled[-1].sent
        ok = requests.post(f"{gateway.url}/run_code", json={"language": "python", "code": "print(6 * 7)"}, timeout=120)
        assert asked_after < 3, "the well-behaved request came after the stalled ones' deadline: nothing was tested"
        assert ok.status_code == 200, ok.text
        assert ok.json()["run_result"]["stdout"] == "42\n"
        for client in stalled:
            status, headers, body, seconds = client.answer()
            assert status == 408, body
            assert "within 3s (RS_GATEWAY_BODY_TIMEOUT_S)" in str(body["detail"])
            assert headers["content-type"] == "application/json"
            assert headers["connection"] == "close"  # and closed (``answer`` waits for that)
            assert 3 <= seconds < 15, seconds
    finally:
        for client in stalled:
            client.close()
    assert metric(gateway.url, "rewardstream_gateway_body_reads") == 0


def test_stalled_bodies_from_one_address_are_capped_and_other_addresses_answered(runs: Stack) -> None:
    gateway = runs.gateway("peer-cap", gateway_body_timeout_s="5", gateway_peer_body_reads="5")
    stalled = [StalledClient(gateway.url) for _ in range(8)]
    try:
        _wait_for(lambda: sum(c.closed_at is not None for c in stalled) == 3, "the 3 past the cap answered")
        # a request without a body (this probe) from the same address needs no body slot
        assert metric(gateway.url, "rewardstream_gateway_body_reads") == 5
        # another address (the whole of 127/8 is loopback) is not held back by this one's stalled bodies ...
        asked_after = time.monotonic() - stalled[-1].sent
        host, port = gateway.url.removeprefix("http://").split(":")
        other = http.client.HTTPConnection(host, int(port), timeout=120, source_address=("127.0.0.2", 0))
        other.request("POST", "/run_code", orjson.dumps({"language": "python", "code": "print(5)"}),
                      {"Content-Type": "application/json"})  # fmt: skip
        answer = other.getresponse()
        assert asked_after < 5, "asked after the stalled ones' deadline: nothing was tested"
        assert answer.status == 200
        assert orjson.loads(answer.read())["run_result"]["stdout"] == "5\n"
        other.close()
        answers = sorted((c.answer() for c in stalled), key=lambda a: a[3])
        assert [a[0] for a in answers] == [429] * 3 + [408] * 5, answers
        for _status, headers, body, seconds in answers[:3]:
            assert "RS_GATEWAY_PEER_BODY_READS" in str(body["detail"])
            assert headers["connection"] == "close"
            assert seconds < 5  # at once, not at the deadline
        assert all(seconds >= 5 for *_, seconds in answers[3:])
    finally:
        for client in stalled:
            client.close()


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s}s: {what}"
        time.sleep(0.05)


#: (route, a body with one lone surrogate, the location the 422 must name)
SURROGATES: list[tuple[str, dict[str, Any], list[str | int]]] = [
    ("/run_code", {"language": "python", "code": "print(1)\ud800"}, ["body", "code"]),
    ("/run_code", {"language": "python", "code": "print(input())", "stdin": "\udc00x"}, ["body", "stdin"]),
    ("/run_code", {"language": "py\ud800thon", "code": "print(1)"}, ["body", "language"]),
    ("/run_code", {"language": "python", "code": "1", "files": {"a\udbff.txt": "aGk="}}, ["body", "files"]),
    ("/run_code", {"language": "python", "code": "1", "fetch_files": ["ok", "\udfff"]}, ["body", "fetch_files", 1]),
    ("/v1/rewards", {"generations": [{"task_id": "t/1", "code": "x"}, {"task_id": "t/1", "code": "def f():\ud800"}]},
     ["body", "generations", 1, "code"]),
    ("/v1/rewards", {"generations": [{"task_id": "t/\ud800", "code": "x"}]}, ["body", "generations", 0, "task_id"]),
    ("/v1/rewards", {"run_id": "r\ud800", "generations": [{"task_id": "t", "code": "x"}]}, ["body", "run_id"]),
    ("/v1/rewards", {"generations": [{"task_id": "t", "code": "x", "metadata": {"k\ud800": "v"}}]},
     ["body", "generations", 0, "metadata"]),
    ("/get_reward", {"query": ["ok", "x\ud800"], "labels": ["t", "t"]}, ["body", "query", 1]),
    ("/get_reward", {"query": ["x"], "labels": ["\ud800"]}, ["body", "labels", 0]),
    ("/get_reward", {"query": ["x"], "prompts": ["\ud800"], "labels": ["t"]}, ["body", "prompts", 0]),
]  # fmt: skip


def test_lone_surrogates_are_a_json_422_naming_the_field_and_log_nothing(url: str, runs: Stack) -> None:
    """Issue 24: a lone surrogate (JSON's ``"\\ud800"``) in ``code``, ``stdin`` or ``language`` answered a text/plain
    500 and logged a traceback (FastAPI's 422 echoes the input, which no UTF-8 encoder takes)."""
    log = runs.gateways[0].log
    logged_before = log.stat().st_size
    json_body = {"Content-Type": "application/json"}
    for route, body, loc in SURROGATES:
        answer = requests.post(f"{url}{route}", data=json.dumps(body).encode(), headers=json_body, timeout=60)
        assert answer.status_code == 422, (route, body, answer.text)
        assert answer.headers["content-type"] == "application/json"
        problem = answer.json()["detail"][0]
        assert problem["loc"] == loc, (route, problem)
        assert "not valid Unicode: a lone surrogate" in problem["msg"]
    # the same as raw bytes (JSON parsers decode them with surrogatepass), and a body that is not UTF-8 at all
    raw = requests.post(f"{url}/run_code", data=b'{"language": "python", "code": "\xed\xa0\x80"}',
                        headers=json_body, timeout=60)  # fmt: skip
    assert (raw.status_code, raw.json()["detail"][0]["loc"]) == (422, ["body", "code"])
    not_utf8 = requests.post(f"{url}/run_code", data=b"\xff\xfe{", headers={"Content-Type": "text/plain"}, timeout=60)
    assert not_utf8.status_code == 422
    assert not_utf8.json()["detail"][0]["input"] == "\\xff\\xfe{"
    nan = requests.post(f"{url}/run_code", data=b'{"language": "python", "code": "1", "run_timeout": NaN}',
                        headers=json_body, timeout=60)  # fmt: skip
    assert (nan.status_code, nan.json()["detail"][0]["loc"]) == (422, ["body", "run_timeout"])  # was a 500 too
    pair = requests.post(f"{url}/run_code", data=json.dumps({"language": "python", "code": "print('\U0001f600')"}),
                         headers=json_body, timeout=120)  # fmt: skip
    assert pair.status_code == 200  # a surrogate pair is one character, not a lone surrogate
    assert pair.json()["run_result"]["stdout"] == "\U0001f600\n"
    logged = log.read_bytes()[logged_before:].decode(errors="replace")
    assert "Traceback" not in logged
    assert "Exception in ASGI application" not in logged


def test_it_refuses_to_listen_beyond_loopback_without_tokens(runs: Stack) -> None:
    env = {k: v for k, v in runs.env.items() if k != "RS_GATEWAY_TOKENS"}
    done = subprocess.run(
        [sys.executable, "-m", "rewardstream", "serve", "--host", "0.0.0.0", "--port", str(free_port())],  # noqa: S104
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("rewardstream: error: the gateway would listen on 0.0.0.0")
    assert "RS_GATEWAY_TOKENS" in done.stderr
    assert "Traceback" not in done.stderr


def test_kafka_unreachable_is_503_and_health_says_why(runs: Stack) -> None:
    dead = runs.gateway(
        "no-kafka", ready=False, kafka_bootstrap=f"127.0.0.1:{free_port()}", gateway_kafka_timeout_s="2"
    )
    health = requests.get(f"{dead.url}/health", timeout=10)
    assert health.status_code == 503
    assert health.json()["status"] == "degraded"
    answer = requests.post(f"{dead.url}/run_code", json={"language": "python", "code": "print(1)"}, timeout=60)
    assert answer.status_code == 503
    assert "Kafka is unreachable" in answer.json()["detail"]


# ---- fuzzing from the OpenAPI schema ----------------------------------------------------------------------
def test_fuzzed_requests_never_get_a_server_error(url: str) -> None:
    """Every operation of the schema, with valid and invalid data (schemathesis' strategies under hypothesis):
    nothing answers 5xx. (Driven here rather than by schemathesis' pytest plugin, whose lazy fixture loading
    reaches into pytest internals that pytest 9 no longer has.)"""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    calls: dict[str, int] = {}
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # the schema is valid
        _fuzz(result.ok(), calls)
    assert len(calls) >= 6, calls  # every operation was called
    print(f"fuzzed: {calls}")


def _fuzz(operation: Any, calls: dict[str, int]) -> None:
    strategy = st.one_of(
        operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
        operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    )
    label = operation.label

    @settings(max_examples=80, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def call(case: Any) -> None:
        response = case.call(timeout=180)
        calls[label] = calls.get(label, 0) + 1
        assert response.status_code < 500, f"{label}: {response.status_code} {response.text[:500]}"

    call()


def test_fuzzed_bodies_with_a_lone_surrogate_are_a_422_naming_where(url: str, runs: Stack) -> None:
    """Valid bodies of every operation that takes one (schemathesis' strategies), with one lone surrogate put
    into one of their strings or keys: a JSON 422 naming where it is, and no traceback in the gateway's log."""
    log = runs.gateways[0].log
    logged_before = log.stat().st_size
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    calls: dict[str, int] = {}
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()
        if operation.method.upper() == "POST":
            _fuzz_surrogates(url, operation, calls)
    assert set(calls) == {"POST /run_code", "POST /v1/rewards", "POST /get_reward"}, calls
    logged = log.read_bytes()[logged_before:].decode(errors="replace")
    assert "Traceback" not in logged
    print(f"fuzzed with lone surrogates: {calls}")


def _fuzz_surrogates(url: str, operation: Any, calls: dict[str, int]) -> None:
    label = operation.label

    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE), data=st.data())
    def call(case: Any, data: st.DataObject) -> None:
        body, loc = data.draw(with_a_lone_surrogate(case.body))
        # sent as a client's JSON encoder sends it, "\udXXX" (schemathesis' own checks choke on the body)
        response = requests.post(
            f"{url}{operation.path}", params=case.query, data=json.dumps(body), timeout=60,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        calls[label] = calls.get(label, 0) + 1
        assert response.status_code == 422, f"{label}: {response.status_code} {response.text[:500]}"
        assert response.headers["content-type"] == "application/json"
        assert response.json()["detail"][0]["loc"] == ["body", *loc], response.text[:500]

    call()


def test_valid_traffic_is_unaffected_after_the_fuzz(url: str, runs: Stack) -> None:
    done = run(url, language="python", code="print(sum(range(10)))")
    assert done.status == sandbox_fusion.RunStatus.Success
    assert done.run_result.stdout == "45\n"
    assert all(p.poll() is None for p in runs.procs[:2]), runs.logs()  # the executor and the gateway still run
    assert orjson.loads(requests.get(f"{url}/health", timeout=10).content)["status"] == "ok"

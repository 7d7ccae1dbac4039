"""The gateway's pure parts: the bind refusal, the door (tokens, caps, the per-token limit, stalled bodies, the
per-address cap), lone surrogates found and errors made encodable, SandboxFusion's shapes
and statuses, OpenRLHF labels and completions, and the executor's run handler (expiry, reply fitting)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine, MutableMapping
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from schemas.codec import MAX_MESSAGE_BYTES, decode, encode
from schemas.errors import ConfigError
from schemas.runs import RunReply, RunRequest, RunStep
from schemas.settings import Settings
from schemas.status import SandboxStatus
from streams.gateway.config import GatewayConfig, home_partition, is_loopback, parse_tokens
from streams.gateway.guard import Counts, Guard, expects_body
from streams.gateway.rewards_api import LabelError, completion_code, parse_label
from streams.gateway.sandbox_fusion import RunCodeRequest, response_of
from streams.gateway.strict_json import validation_response
from streams.gateway.surrogates import lone_surrogate_at
from tests.unit.lone_surrogates import with_a_lone_surrogate
from workers.handler import Done, InvalidEventError, Source
from workers.languages import SourceRun
from workers.roles.run_code import RunHandler
from workers.sandbox.api import SandboxResult

TOKEN = "a-token-of-16-chars-or-more"  # noqa: S105
SOURCE = Source("rs.run_requests", 0, 7)


# ---- the bind -----------------------------------------------------------------------------------------------
def test_an_open_bind_without_tokens_is_refused_and_loopback_is_not() -> None:
    with pytest.raises(ConfigError, match="RS_GATEWAY_TOKENS"):
        GatewayConfig.from_settings(Settings(gateway_host="0.0.0.0"))  # noqa: S104
    assert GatewayConfig.from_settings(Settings(gateway_host="127.0.0.1")).tokens == ()
    with_tokens = GatewayConfig.from_settings(Settings(gateway_host="0.0.0.0", gateway_tokens=f"{TOKEN}, b{TOKEN}"))  # noqa: S104
    assert with_tokens.tokens == (TOKEN, f"b{TOKEN}")
    hosts = ("127.0.0.1", "127.5.0.1", "::1", "[::1]", "localhost", "0.0.0.0", "10.0.0.1")  # noqa: S104
    assert [is_loopback(h) for h in hosts] == [True, True, True, True, True, False, False]
    with pytest.raises(ConfigError, match="shorter than 16"):
        parse_tokens("short")
    assert parse_tokens(" , ") == ()


def test_a_replica_reads_one_partition_of_the_replies() -> None:
    parts = {home_partition(f"gw-{n}", 6) for n in range(100)}
    assert parts <= set(range(6))
    assert len(parts) > 1
    assert home_partition("gw-1", 6) == home_partition("gw-1", 6)


# ---- the door -----------------------------------------------------------------------------------------------
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _app() -> FastAPI:
    app = FastAPI()

    @app.post("/work")
    async def work(body: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "size": len(str(body))}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def _call(guard: Guard, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=guard)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test") as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(go())


def _guard(tokens: tuple[str, ...] = (TOKEN,), concurrency: int = 2) -> Guard:
    return Guard(_app(), tokens=tokens, concurrency=concurrency, max_body_bytes=1000)


def test_tokens_are_checked_before_anything_runs() -> None:
    guard = _guard()
    missing = _call(guard, "POST", "/work", json={})
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert _call(guard, "POST", "/work", json={}, headers={"Authorization": "Basic abc"}).status_code == 401
    assert _call(guard, "POST", "/work", json={}, headers={"Authorization": "Bearer nope"}).status_code == 403
    assert _call(guard, "POST", "/work", json={}, headers=AUTH).json()["ok"] is True
    assert _call(guard, "GET", "/health").status_code == 200  # open
    assert _call(_guard(tokens=()), "POST", "/work", json={}).status_code == 200  # loopback, no tokens
    assert guard.metrics.registry.get_sample_value(
        "rewardstream_gateway_requests_total", {"route": "other", "status": "401"}
    ) == 2  # fmt: skip


def test_bodies_over_the_cap_are_413_declared_or_streamed() -> None:
    guard = _guard()
    big = _call(guard, "POST", "/work", json={"x": "y" * 2000}, headers=AUTH)
    assert big.status_code == 413
    assert "1000-byte cap" in big.json()["detail"]

    async def chunks() -> AsyncIterator[bytes]:
        for part in (b'{"x": "', b"y" * 2000, b'"}'):
            yield part

    streamed = _call(guard, "POST", "/work", content=chunks(), headers=AUTH)
    assert streamed.status_code == 413
    assert "cap" in streamed.json()["detail"]


def test_the_per_token_limit_is_429_and_frees_its_slot() -> None:
    guard = _guard(concurrency=1)
    guard.in_flight["token-0"] = 1  # one request of this token in flight
    held = _call(guard, "POST", "/work", json={}, headers=AUTH)
    assert held.status_code == 429
    assert "already in flight" in held.json()["detail"]
    guard.in_flight["token-0"] = 0
    assert _call(guard, "POST", "/work", json={}, headers=AUTH).status_code == 200
    assert guard.in_flight["token-0"] == 0  # the slot is given back


def _stalling(guard: Guard, peer: str = "10.0.0.1") -> Coroutine[Any, Any, list[dict[str, Any]]]:
    """A request that declares a body and never sends it (its client stays connected): what it was answered."""

    async def go() -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            await asyncio.Event().wait()  # the body never comes
            raise AssertionError("unreachable")

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(dict(message))

        headers = [(b"content-length", b"100"), (b"authorization", f"Bearer {TOKEN}".encode())]
        scope = {"type": "http", "method": "POST", "path": "/work", "headers": headers, "client": (peer, 40000)}
        await guard(scope, receive, send)
        return sent

    return go()


def _answer(sent: list[dict[str, Any]]) -> tuple[int, dict[bytes, bytes], Any]:
    start, body = sent
    return start["status"], dict(start["headers"]), orjson.loads(body["body"])


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


def test_a_stalled_body_holds_no_slot_and_is_408_at_its_deadline() -> None:
    """Four clients that send headers and stall do not lock out their token (one slot): its slot is taken
    only once a body is in, and each stalled one is answered 408 at the deadline and its connection closed."""
    guard = Guard(_app(), tokens=(TOKEN,), concurrency=1, max_body_bytes=1000, body_timeout_s=0.5)

    async def go() -> tuple[httpx.Response, list[list[dict[str, Any]]], float]:
        started = time.monotonic()
        stalled = [asyncio.create_task(_stalling(guard)) for _ in range(4)]
        await _until(lambda: guard.reading.get("10.0.0.1") == 4)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=guard), base_url="http://gw.test") as client:
            good = await client.post("/work", json={"a": 1}, headers=AUTH)
        answers = await asyncio.wait_for(asyncio.gather(*stalled), 10)
        return good, answers, time.monotonic() - started

    good, answers, elapsed = asyncio.run(go())
    assert good.status_code == 200
    assert good.json()["ok"] is True
    for sent in answers:
        status, headers, body = _answer(sent)
        assert status == 408
        assert headers[b"connection"] == b"close"
        assert "within 0.5s (RS_GATEWAY_BODY_TIMEOUT_S)" in body["detail"]
    assert elapsed >= 0.5
    assert guard.reading.held == {}  # every body slot given back
    assert guard.in_flight == {"token-0": 0}  # the one request that ran took the slot, and gave it back
    assert guard.metrics.registry.get_sample_value("rewardstream_gateway_body_reads") == 0
    assert guard.metrics.registry.get_sample_value(
        "rewardstream_gateway_requests_total", {"route": "other", "status": "408"}
    ) == 4  # fmt: skip


def test_bodies_arriving_at_once_are_capped_per_peer_address() -> None:
    guard = Guard(_app(), tokens=(TOKEN,), concurrency=8, max_body_bytes=1000, body_timeout_s=60, peer_body_reads=2)

    async def go() -> None:
        stalled = [asyncio.create_task(_stalling(guard)) for _ in range(2)]
        await _until(lambda: guard.reading.get("10.0.0.1") == 2)
        status, headers, body = _answer(await asyncio.wait_for(_stalling(guard), 5))  # one too many: at once
        assert status == 429
        assert headers[b"connection"] == b"close"
        assert "RS_GATEWAY_PEER_BODY_READS" in body["detail"]
        # another address is not held back; nor is a request of the same one that has no body to send
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=guard), base_url="http://gw.test") as client:
            assert (await client.post("/work", json={}, headers=AUTH)).status_code == 200
        bodiless = httpx.ASGITransport(app=guard, client=("10.0.0.1", 40001))
        async with httpx.AsyncClient(transport=bodiless, base_url="http://gw.test") as client:
            assert (await client.get("/health")).status_code == 200
        for task in stalled:  # the clients go away: their slots are given back
            task.cancel()
        await asyncio.gather(*stalled, return_exceptions=True)

    asyncio.run(go())
    assert guard.reading.held == {}
    assert guard.metrics.registry.get_sample_value("rewardstream_gateway_body_reads") == 0


def test_which_requests_have_a_body_to_wait_for() -> None:
    assert expects_body({b"content-length": b"12"})
    assert expects_body({b"transfer-encoding": b"chunked"})
    assert not expects_body({})
    assert not expects_body({b"content-length": b"0"})
    assert not expects_body({b"content-length": b"000"})
    counts = Counts()
    counts.take("a")
    counts.take("a")
    counts.give("a")
    assert counts.get("a") == 1
    counts.give("a")
    assert counts.held == {}  # an address at zero is forgotten


# ---- lone surrogates ----------------------------------------------------------------------------------------
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(value=_JSON, data=st.data())
def test_a_lone_surrogate_is_found_where_it_was_put(value: object, data: st.DataObject) -> None:
    assert lone_surrogate_at(value) is None  # text without surrogates, and pairs joined, are fine
    assert lone_surrogate_at(json.loads(json.dumps(value))) is None
    spoiled, loc = data.draw(with_a_lone_surrogate(value))
    parsed = json.loads(json.dumps(spoiled))  # through JSON as a client sends it: a "\udXXX" escape
    found = lone_surrogate_at(parsed)
    assert found is not None
    assert found[0] == loc
    assert "not valid Unicode: a lone surrogate" in found[1]
    found[1].encode()  # the problem itself can be sent


def test_errors_that_echo_what_no_encoder_takes_are_still_a_json_422() -> None:
    errors = [
        {
            "type": "string_type",
            "loc": ("body", "k\udc80"),
            "msg": "m\ud800",
            "input": "x\ud800",
            "ctx": {"c": "\udfff"},
        },
        {"type": "model_attributes_type", "loc": ("body",), "msg": "not an object", "input": b"\xff\xfe{"},
    ]
    answer = validation_response(errors)
    assert answer.status_code == 422
    detail = orjson.loads(answer.body)["detail"]
    assert detail[0] == {
        "type": "string_type", "loc": ["body", "k\\udc80"], "msg": "m\\ud800", "input": "x\\ud800",
        "ctx": {"c": "\\udfff"},
    }  # fmt: skip
    assert detail[1]["input"] == "\\xff\\xfe{"
    nan = validation_response([{"type": "greater_than", "loc": ("body", "run_timeout"), "msg": "> 0",
                                "input": float("nan"), "ctx": {"gt": 0.0}}])  # fmt: skip
    assert orjson.loads(nan.body)["detail"] == [
        {"type": "greater_than", "loc": ["body", "run_timeout"], "msg": "> 0", "input": None, "ctx": {"gt": 0.0}}
    ]
    plain = validation_response([{"type": "missing", "loc": ("body", "code"), "msg": "Field required", "input": {}}])
    assert orjson.loads(plain.body) == {
        "detail": [{"type": "missing", "loc": ["body", "code"], "msg": "Field required", "input": {}}]
    }  # as FastAPI's own handler answers


# ---- SandboxFusion ------------------------------------------------------------------------------------------
def _reply(**fields: Any) -> RunReply:
    return RunReply(request_id="r1", reply_to="gw", language="python", worker="host:1", **fields)


def _step(status: str, exit_code: int | None = 0, **more: Any) -> RunStep:
    return RunStep(status=SandboxStatus(status), exit_code=exit_code, wall_ms=1500.0, **more)


def test_statuses_are_sandbox_fusions() -> None:
    ok = response_of(_reply(run=_step("ok", stdout="hi\n")))
    assert (ok.status, ok.run_result.status, ok.run_result.return_code, ok.run_result.execution_time) == (  # type: ignore[union-attr]
        "Success", "Finished", 0, 1.5)  # fmt: skip
    assert ok.compile_result is None
    assert ok.executor_pod_name == "host:1"
    failed = response_of(_reply(run=_step("nonzero_exit", 1)))
    assert (failed.status, failed.run_result.status) == ("Failed", "Finished")  # type: ignore[union-attr]
    tle = response_of(_reply(run=_step("timeout", None)))
    assert (tle.status, tle.run_result.status, tle.run_result.return_code) == ("Failed", "TimeLimitExceeded", None)  # type: ignore[union-attr]
    oom = response_of(_reply(run=_step("memory_limit", None, signal=9)))
    assert (oom.status, oom.run_result.return_code) == ("Failed", -9)  # type: ignore[union-attr]
    broken = response_of(_reply(run=_step("sandbox_error", None, stderr="the backend died")))
    assert (broken.status, broken.message, broken.run_result.status) == ("SandboxError", "the backend died", "Error")  # type: ignore[union-attr]
    compile_failed = response_of(_reply(compile=_step("nonzero_exit", 1, stderr="error: x")))
    assert (compile_failed.status, compile_failed.run_result) == ("Failed", None)
    unsupported = response_of(_reply(error_kind="unsupported_language", error="language 'lean' is not run here"))
    assert (unsupported.status, unsupported.message) == ("SandboxError", "language 'lean' is not run here")
    with_files = response_of(_reply(run=_step("ok"), files={"a/b.txt": "aGk="}))
    assert with_files.files == {"a/b.txt": "aGk="}


def test_run_code_requests_are_validated_like_the_field_says() -> None:
    good = RunCodeRequest.model_validate(
        {"code": "x", "language": "python", "files": {"a/b": "aGk=", "skip": None}, "compile_timeout": 3}
    )
    assert good.written_files() == {"a/b": "aGk="}  # a null content is skipped
    assert good.memory_limit_MB == -1
    for bad, where in (
        ({"code": "x", "language": "cobol"}, "language"),
        ({"code": "x", "language": "python", "memory_limit_MB": 8}, "memory_limit_MB"),
        ({"code": "x", "language": "python", "files": {"../up": "aGk="}}, "files"),
        ({"code": "x", "language": "python", "files": {"a": "***"}}, "files"),
        ({"code": "x", "language": "python", "fetch_files": ["a\0b"]}, "fetch_files"),
        ({"code": "x", "language": "python", "run_timeout": -1}, "run_timeout"),
    ):
        with pytest.raises(ValidationError) as err:
            RunCodeRequest.model_validate(bad)
        assert err.value.errors()[0]["loc"][0] == where


# ---- OpenRLHF -----------------------------------------------------------------------------------------------
def test_labels_name_tasks_and_completions_hold_the_code() -> None:
    assert parse_label("HumanEval/0") == ("HumanEval/0", "python")
    assert parse_label('{"task_id": "t/1", "language": "python"}') == ("t/1", "python")
    for bad in ("", "{oops", '{"language": "python"}', '{"task_id": 3}'):
        with pytest.raises(LabelError):
            parse_label(bad)
    prompt = "<|im_start|>user\nwrite f<|im_end|>\n<|im_start|>assistant\n"
    fenced = f"{prompt}Sure:\n```python\ndef f():\n    return 1\n```\ntrailing words<|im_end|>"
    assert completion_code(fenced, prompt) == "def f():\n    return 1\n"
    bare = "def f():\n    return 2<|im_end|><|endoftext|>"
    assert completion_code(bare, None) == "def f():\n    return 2"
    continuation = "def f():\n    '''doc'''\n"
    assert completion_code(continuation + "    return 3\n", continuation) == continuation + "    return 3\n"


# ---- the executor's run handler -----------------------------------------------------------------------------
def _request(**fields: Any) -> RunRequest:
    base: dict[str, Any] = {
        "request_id": "req-1", "reply_to": "gw-1", "reply_partition": 2, "language": "python", "code": "print(1)",
        "deadline": datetime.now(UTC) + timedelta(seconds=60),
    }  # fmt: skip
    return RunRequest(**{**base, **fields})


def _ran(stdout: bytes = b"", stderr: bytes = b"") -> SandboxResult:
    return SandboxResult(SandboxStatus.OK, 0, None, stdout, stderr, False, False, 0.0, 0.0, 0, "process")


class _Recorder:
    def __init__(self, result: SourceRun) -> None:
        self.result = result
        self.calls: list[dict[str, Any]] = []

    def __call__(self, _sandbox: object, language: str, code: str, **kwargs: Any) -> SourceRun:
        self.calls.append({"language": language, "code": code, **kwargs})
        return self.result


def _handler(result: SourceRun, **kwargs: Any) -> tuple[RunHandler, _Recorder]:
    run = _Recorder(result)
    handler = RunHandler(object(), replies_topic="rs.run_replies", partitions=3, worker="w:1", run=run,  # type: ignore[arg-type]
                         **kwargs)  # fmt: skip
    return handler, run


def test_a_run_is_replied_on_the_partition_its_gateway_reads() -> None:
    handler, run = _handler(SourceRun("python", run=_ran(stdout=b"1\n"), files={"out.txt": b"hi"}))
    done = handler.handle(_request(files={"in.txt": "aGk="}, fetch_files=["out.txt"]), SOURCE)
    assert isinstance(done, Done)
    (out,) = done.outputs
    assert (out.topic, out.key, out.partition) == ("rs.run_replies", b"req-1", 2)
    reply = decode(out.value or b"", RunReply)
    assert reply.run is not None
    assert (reply.request_id, reply.reply_to, reply.run.stdout) == ("req-1", "gw-1", "1\n")
    assert reply.files == {"out.txt": "aGk="}
    assert run.calls[0]["files"] == {"in.txt": b"hi"}
    assert run.calls[0]["fetch_files"] == ["out.txt"]
    assert done.log is not None
    assert done.log.fields["request_id"] == "req-1"
    assert done.status == "ok"


def test_an_expired_request_is_answered_without_running() -> None:
    handler, run = _handler(SourceRun("python", run=_ran()))
    done = handler.handle(_request(deadline=datetime.now(UTC) - timedelta(seconds=1)), SOURCE)
    assert isinstance(done, Done)
    reply = decode(done.outputs[0].value or b"", RunReply)
    assert reply.error_kind == "expired"
    assert reply.run is None
    assert run.calls == []


def test_requests_no_executor_can_answer_are_invalid_events() -> None:
    handler, _ = _handler(SourceRun("python", run=_ran()))
    with pytest.raises(InvalidEventError, match="reply_partition 5"):
        handler.handle(_request(reply_partition=5), SOURCE)
    with pytest.raises(InvalidEventError, match="base64"):
        handler.handle(_request(files={"a": "abc"}), SOURCE)


def test_a_huge_reply_is_cut_to_one_message_and_says_so() -> None:
    flood = b"\x01" * (2 << 20)  # control characters: six bytes each once escaped in JSON
    files = {f"f{n}.bin": bytes(200_000) for n in range(4)}
    handler, _ = _handler(SourceRun("python", run=_ran(stdout=flood, stderr=flood), files=files))
    done = handler.handle(_request(), SOURCE)
    assert isinstance(done, Done)
    value = done.outputs[0].value or b""
    assert len(value) <= MAX_MESSAGE_BYTES
    reply = decode(value, RunReply)
    assert reply.run is not None
    assert reply.run.stdout_truncated
    assert reply.notes
    assert 0 < len(reply.files) < 4
    assert base64.b64decode(next(iter(reply.files.values()))) == bytes(200_000)
    assert encode(reply) == value

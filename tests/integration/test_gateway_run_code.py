"""``POST /run_code`` through the real gateway process, Kafka and an executor with real sandboxes, driven by the
real ``sandbox-fusion`` client: answers, timeouts, errors, files in and out, 50 at once; the door (tokens, caps,
the per-token limit, stalled bodies, the per-address cap, Kafka down); lone surrogates; the run's log record and
dead letters; a fuzz from the OpenAPI schema (and one with lone surrogates put in).

One executor and one gateway per module (the expensive part), shared by every test here.
"""

from __future__ import annotations

import base64
import http.client
import importlib.util
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
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

from schemas.codec import decode
from schemas.events import DeadLetter, LogRecord
from tests.integration.gateway_env import Stack, StalledClient, free_port, metric, stack
from tests.integration.reward_env import REPO, Reader
from tests.sandbox.language_programs import SOLUTIONS
from tests.unit.lone_surrogates import with_a_lone_surrogate

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

TOKEN = "test-token-" + "x" * 16


@pytest.fixture(scope="module")
def runs(kafka_config: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("gateway-runs")
    with stack(kafka_config, f"gwrun-{uuid.uuid4().hex[:8]}", tmp) as made:
        made.spawn("executor", ["worker", "executor", "--concurrency", "2"])
        made.gateway()
        yield made


@pytest.fixture(scope="module")
def url(runs: Stack) -> str:
    return runs.gateways[0].url


def run(url: str, **fields: object) -> sandbox_fusion.RunCodeResponse:
    """One call of the real client (no retries: a SandboxError raises at once)."""
    request = sandbox_fusion.RunCodeRequest(**fields)
    return sandbox_fusion.run_code(request, endpoint=url, max_attempts=1, client_timeout=120)


def test_python_answers_reads_stdin_and_fails_as_sandbox_fusion_says(url: str) -> None:
    done = run(url, language="python", code="print(int(input()) * 2)", stdin="21", run_timeout=10)
    assert done.status == sandbox_fusion.RunStatus.Success, done
    assert done.run_result is not None
    assert done.run_result.status == sandbox_fusion.CommandRunStatus.Finished
    assert done.run_result.stdout == "42\n"
    assert done.run_result.return_code == 0
    assert done.compile_result is None
    assert done.executor_pod_name  # the executor that ran it

    syntax = run(url, language="python", code="int a = 1", run_timeout=10)  # python's compile error
    assert syntax.status == sandbox_fusion.RunStatus.Failed
    assert syntax.run_result is not None
    assert syntax.run_result.status == sandbox_fusion.CommandRunStatus.Finished
    assert syntax.run_result.return_code == 1
    assert "SyntaxError" in (syntax.run_result.stderr or "")

    failed = run(url, language="python", code="assert 1 == 2", run_timeout=10)
    assert failed.status == sandbox_fusion.RunStatus.Failed
    assert "AssertionError" in (failed.run_result.stderr or "")


#: SandboxFusion's name of each language the languages runner has (``c`` is ours: SandboxFusion has none).
SF_NAMES = {"python": "python", "bash": "bash", "cpp": "cpp", "c": "c", "nodejs": "javascript",
            "typescript": "typescript", "go": "go", "java": "java", "rust": "rust", "php": "php", "ruby": "ruby",
            "lua": "lua", "perl": "perl", "R": "r", "csharp": "csharp", "kotlin_script": "kotlin", "scala": "scala",
            "racket": "racket", "verilog": "verilog", "D_ut": "d"}  # fmt: skip
COMPILED = {"cpp", "c", "go", "java", "rust", "typescript", "csharp", "kotlin_script", "scala", "verilog", "D_ut"}


def test_every_language_runs_right_and_reports_its_compile_errors(url: str) -> None:
    """A right program (64-bit sum of stdin) and a broken one per language, all at once on the two slots;
    a compiled language's broken program stops at its compile step (``run_result`` None), as SandboxFusion's."""
    jobs = [(name, kind) for name in SF_NAMES for kind in ("right", "broken")]

    def call(job: tuple[str, str]) -> tuple[str, str, dict[str, Any]]:
        name, kind = job
        program = getattr(SOLUTIONS[SF_NAMES[name]], kind)
        body = {"language": name, "code": program, "stdin": "4000000000 5000000000\n", "compile_timeout": 60,
                "run_timeout": 20}  # fmt: skip
        answer = requests.post(f"{url}/run_code", json=body, timeout=400)
        assert answer.status_code == 200, answer.text
        return name, kind, answer.json()

    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(call, jobs))
    problems = []
    for name, kind, got in results:
        ran, built = got["run_result"], got["compile_result"]
        if kind == "right":
            if got["status"] != "Success" or ran["stdout"] != "9000000000\n":
                problems.append(f"{name} right: {got}")
            if (built is not None) != (name in COMPILED):
                problems.append(f"{name}: compile_result {built}")
        elif name in COMPILED:
            if (
                got["status"] != "Failed"
                or ran is not None
                or built["status"] != "Finished"
                or built["return_code"] == 0
            ):
                problems.append(f"{name} broken: {got}")
        elif got["status"] != "Failed" or ran["return_code"] == 0:
            problems.append(f"{name} broken: {got}")
    assert not problems, "\n".join(problems)
    print(f"{len(jobs)} programs in {len(SF_NAMES)} languages: {time.monotonic() - started:.1f}s")


def test_a_run_over_its_time_is_time_limit_exceeded(url: str) -> None:
    started = time.monotonic()
    slow = run(url, language="python", code="import time\nprint('started', flush=True)\ntime.sleep(30)", run_timeout=1)
    assert slow.status == sandbox_fusion.RunStatus.Failed
    assert slow.run_result is not None
    assert slow.run_result.status == sandbox_fusion.CommandRunStatus.TimeLimitExceeded
    assert slow.run_result.return_code is None
    assert time.monotonic() - started < 20


def test_files_go_in_and_come_back(url: str) -> None:
    code = (
        "import os\n"
        "print(open('data/in/secret.txt').read())\n"
        "os.makedirs('out/deep', exist_ok=True)\n"
        "open('out/deep/result.bin', 'wb').write(bytes(range(256)))\n"
        "open('top.txt', 'w').write('top')\n"
    )
    done = run(
        url, language="python", code=code, run_timeout=10,
        files={"data/in/secret.txt": base64.b64encode(b"hello files").decode()},
        fetch_files=["out/deep/result.bin", "top.txt", "never/written.txt"],
    )  # fmt: skip
    assert done.status == sandbox_fusion.RunStatus.Success, done
    assert done.run_result is not None
    assert done.run_result.stdout == "hello files\n"
    assert base64.b64decode(done.files["out/deep/result.bin"]) == bytes(range(256))
    assert base64.b64decode(done.files["top.txt"]) == b"top"
    assert "never/written.txt" not in done.files  # SandboxFusion leaves out what does not exist


def test_files_at_absolute_paths_live_in_the_runs_own_mounts(url: str) -> None:
    """SandboxFusion's clients name /mnt/...: the run's own tmpfs there (and /tmp), nested too; elsewhere is refused."""
    code = (
        "import os\n"
        "print(open('/mnt/in/deep/c').read(), open('/tmp/t/u').read())\n"
        "open('/mnt/b', 'w').write('sauce')\n"
        "os.makedirs('/mnt/x/y')\n"
        "open('/mnt/x/y/z', 'w').write('zz')\n"
    )
    b64 = {k: base64.b64encode(v).decode() for k, v in {"/mnt/in/deep/c": b"abs", "/tmp/t/u": b"tmp"}.items()}
    done = run(url, language="python", code=code, files=b64, fetch_files=["/mnt/b", "/mnt/x", "/tmp/t/u"])
    assert done.status == sandbox_fusion.RunStatus.Success, done
    assert done.run_result is not None
    assert done.run_result.stdout == "abs tmp\n"
    assert {k: base64.b64decode(v) for k, v in done.files.items()} == {
        "/mnt/b": b"sauce", "/mnt/x/y/z": b"zz", "/tmp/t/u": b"tmp",
    }  # fmt: skip
    again = run(url, language="python", code="import os; print(os.listdir('/mnt'))")
    assert again.run_result is not None
    assert again.run_result.stdout == "[]\n"  # nothing of the last run is left
    refused = requests.post(
        f"{url}/run_code", json={"language": "python", "code": "1", "fetch_files": ["/etc/passwd"]}, timeout=60
    )
    assert refused.json()["status"] == "SandboxError"
    assert "/mnt" in refused.json()["message"]


#: What SandboxFusion's runner tests import or run, each with the output that shows it worked.
LIBRARIES = [
    ("java", 'import org.javatuples.Pair;\npublic class Main { public static void main(String[] a) '
     '{ System.out.println(Pair.with("x", 1)); } }', "Success", "[x, 1]"),
    ("lua", "lu = require('luaunit')\nlu.assertEquals(1, 2)", "Failed", "LuaUnit test FAILURE"),
    ("perl", 'use Test::Deep; use Data::Compare; print eq_deeply([1], [1]) ? "deep\\n" : "no\\n";', "Success", "deep"),
    ("pytest", "def test_a(tmp_path):\n    assert tmp_path.is_dir()\n", "Success", "1 passed"),
    ("pytest", "def test_a():\n    assert 1 == 2\n", "Failed", "1 failed"),
    ("go_test", 'package main\nimport (\n"testing"\n"github.com/stretchr/testify/assert"\n)\n'
     "func TestX(t *testing.T) { assert.Equal(t, 1, 2) }\n", "Failed", "Not equal"),
    ("junit", "import org.junit.jupiter.api.Test;\nimport static org.junit.jupiter.api.Assertions.*;\n"
     "public class P { static int f() { return 1; } }\nclass PTest { @Test void t() { assertEquals(1, P.f()); } }\n",
     "Success", "1 tests successful"),
]  # fmt: skip


@pytest.mark.parametrize(("language", "code", "status", "shown"), LIBRARIES)
def test_the_libraries_and_test_modes_sandbox_fusion_tests_use(
    url: str, language: str, code: str, status: str, shown: str
) -> None:
    raw = requests.post(
        f"{url}/run_code", json={"language": language, "code": code, "run_timeout": 30, "compile_timeout": 60},
        timeout=180,
    )  # fmt: skip
    body = raw.json()
    assert body["status"] == status, body
    result = body["run_result"]
    assert shown in result["stdout"] + result["stderr"], body


def test_bash_runs_and_its_exit_code_comes_back(url: str) -> None:
    done = run(url, language="bash", code="echo $((6 * 7)); read x; echo got $x; exit 3", stdin="in\n", run_timeout=10)
    assert done.status == sandbox_fusion.RunStatus.Failed
    assert done.run_result is not None
    assert (done.run_result.stdout, done.run_result.return_code) == ("42\ngot in\n", 3)


def test_a_language_not_run_here_is_a_sandbox_error_and_an_unknown_one_a_422(url: str) -> None:
    with pytest.raises(Exception, match="lean"):  # the client raises on SandboxError, with the message
        run(url, language="lean", code="theorem t : 1 = 1 := rfl")
    raw = requests.post(f"{url}/run_code", json={"language": "lean", "code": "x"}, timeout=60)
    assert raw.status_code == 200
    assert raw.json()["status"] == "SandboxError"
    assert "not run here" in raw.json()["message"]
    unknown = requests.post(f"{url}/run_code", json={"language": "cobol", "code": "x"}, timeout=60)
    assert unknown.status_code == 422
    assert unknown.json()["detail"][0]["loc"] == ["body", "language"]
    missing = requests.post(f"{url}/run_code", json={"language": "python"}, timeout=60)
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["loc"] == ["body", "code"]


def test_fifty_concurrent_requests_each_get_their_own_answer(url: str) -> None:
    kwargs = [
        {"request": sandbox_fusion.RunCodeRequest(language="python", code=f"print({i} * 3)", run_timeout=20),
         "endpoint": url, "max_attempts": 1, "client_timeout": 300}
        for i in range(50)
    ]  # fmt: skip
    started = time.monotonic()
    answers = sandbox_fusion.run_concurrent(sandbox_fusion.run_code, kwargs=kwargs, concurrency=50)
    elapsed = time.monotonic() - started
    assert [a.status for a in answers] == [sandbox_fusion.RunStatus.Success] * 50
    assert [a.run_result.stdout for a in answers] == [f"{i * 3}\n" for i in range(50)]
    print(f"50 concurrent /run_code on 2 executor slots: {elapsed:.1f}s")


def test_each_run_is_logged_and_a_bad_request_is_dead_lettered(
    runs: Stack, url: str, kafka_config: dict[str, str]
) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    assert run(url, language="python", code=f"print('{marker}')").status == sandbox_fusion.RunStatus.Success
    logs = Reader(kafka_config, f"{runs.prefix}logs")

    def logged() -> bool:
        records = [decode(v, LogRecord) for v in logs.values]
        return any(r.component == "executor" and r.fields.get("status") == "ok" for r in records)

    logs.wait(logged, 60, "the run's log record")
    from confluent_kafka import Producer

    producer = Producer(kafka_config)
    producer.produce(f"{runs.prefix}run_requests", key=b"bad", value=b'{"request_id": "bad"}')
    assert producer.flush(30) == 0
    dlq = Reader(kafka_config, f"{runs.prefix}dlq")

    def dead() -> list[DeadLetter]:
        letters = [decode(v, DeadLetter) for v in dlq.values]
        return [d for d in letters if d.source_topic == f"{runs.prefix}run_requests"]

    dlq.wait(lambda: bool(dead()), 60, "the dead letter of the bad run request")
    assert dead()[0].error_type == "DecodeError"
    assert "reply_to" in dead()[0].error  # the reason names a missing field
    metrics = requests.get(f"{url}/metrics", timeout=10).text
    assert 'rewardstream_gateway_runs_total{status="Success"}' in metrics


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


def test_the_sandbox_fusion_client_example_runs(url: str) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "sandbox_fusion_client.py"), "--endpoint", url],
        cwd=REPO, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Success 42" in done.stdout, done.stdout


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


def test_the_gateway_benchmark_measures_both_ways(url: str, process_sandbox: Any) -> None:
    """A short run of ``benchmarks/bench_gateway.py``'s latency part (its figures come from the full run)."""
    path = REPO / "benchmarks" / "bench_gateway.py"
    spec = importlib.util.spec_from_file_location("bench_gateway", path)
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_gateway", bench)
    spec.loader.exec_module(bench)
    result = bench.latency(url, process_sandbox, 5)
    assert result["gateway_ms"]["n"] == result["direct_ms"]["n"] == 5
    assert set(result["added_ms"]) == {"p50", "p99"}


def test_go_test_builds_within_the_run_timeout_as_sandbox_fusion_times_it(url: str) -> None:
    """SandboxFusion runs ``go test`` as one command under ``run_timeout``; building testify from an empty cache
    takes longer than a 1 s ``compile_timeout``, so the build gets the run's timeout too."""
    code = (
        'package main\nimport (\n"testing"\n"github.com/stretchr/testify/assert"\n)\n'
        "func TestX(t *testing.T) { assert.Equal(t, 2, 1+1) }\n"
    )
    raw = requests.post(
        f"{url}/run_code", json={"language": "go_test", "code": code, "run_timeout": 60, "compile_timeout": 1},
        timeout=240,
    )  # fmt: skip
    body = raw.json()
    assert body["status"] == "Success", body
    assert body["compile_result"]["status"] == "Finished", body
    assert "ok" in body["run_result"]["stdout"], body

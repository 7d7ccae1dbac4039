"""``POST /run_code`` through the real gateway and sandboxes: answers, languages, files, 50 at once, logs."""

from __future__ import annotations

import base64
import importlib.util
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
import sandbox_fusion

from schemas.codec import decode
from schemas.events import DeadLetter, LogRecord
from tests.integration.gateway_env import Stack
from tests.integration.gateway_run_code_env import run
from tests.integration.reward_env import REPO, Reader
from tests.sandbox.language_programs import SOLUTIONS

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]


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


def test_the_sandbox_fusion_client_example_runs(url: str) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "sandbox_fusion_client.py"), "--endpoint", url],
        cwd=REPO, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Success 42" in done.stdout, done.stdout


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

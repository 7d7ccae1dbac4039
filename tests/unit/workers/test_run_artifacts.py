"""The candidate's output and a run's artifacts, without services: the harness reports what candidate
processes printed (never the protocol or check code's output), the executor keeps the tail inline and stores
the rest, per-case results and the code content-addressed, and an upload cut short by a stop never finishes.

The harness runs unisolated through ``LocalRunner`` with the benign programs written here only; S3 is an
in-memory stand-in for the minio client (the real one is in tests/integration/test_artifacts_events.py).
"""

from __future__ import annotations

import hashlib
import io
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from minio.error import S3Error

from guest import harness
from guest.framing import MAGIC
from schemas.codec import decode
from schemas.events import OUTPUT_TAIL_MAX_CHARS, ExecutionResult, GenerationEvent, HiddenVerdict
from schemas.tasks import Task
from tests.unit.workers.grading.test_grader import LocalRunner
from tests.unit.workers.grading.test_grader import grader as local_grader
from workers.artifacts import ArtifactError, ArtifactStore, RetryPolicy
from workers.grading.grader import CandidateOutput, public_suite, split_output
from workers.handler import Done, Source
from workers.roles.common import RoleContext, TaskSource
from workers.roles.executor import ExecutorHandler, output_tail
from workers.roles.verifier import VerifierHandler
from workers.tasks.registry import TaskRegistry

SOURCE = Source("rs.generations", 0, 7)
ADD = "def add(a, b):\n    return a + b\n"


class MemoryS3:
    """The part of the minio client the store uses, in memory; counts requests; can be made to fail."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}
        self.buckets: set[str] = set()
        self.requests: list[str] = []
        self.fail: BaseException | None = None

    def _call(self, what: str) -> None:
        self.requests.append(what)
        if self.fail is not None:
            raise self.fail

    def bucket_exists(self, bucket: str) -> bool:
        self._call("bucket_exists")
        return bucket in self.buckets

    def make_bucket(self, bucket: str) -> None:
        self._call("make_bucket")
        self.buckets.add(bucket)

    def stat_object(self, bucket: str, key: str) -> object:
        self._call("stat")
        if (bucket, key) not in self.objects:
            raise S3Error(None, "NoSuchKey", "no such key", key, "r", "h")  # type: ignore[arg-type]
        return object()

    def put_object(self, bucket: str, key: str, data: io.BytesIO, length: int, **_kw: Any) -> None:
        self._call("put")
        self.objects[(bucket, key)] = data.read(length)

    def get_object(self, bucket: str, key: str) -> Any:
        self._call("get")
        response = io.BytesIO(self.objects[(bucket, key)])
        response.release_conn = lambda: None  # type: ignore[attr-defined]
        return response

    def get(self, url: str) -> bytes:
        bucket, key = url[5:].split("/", 1)
        return self.objects[(bucket, key)]


def task(public: dict[str, Any], entry_point: str | None = "add") -> Task:
    hidden = {"kind": "call", "cases": [{"id": "h1", "args": [40, 2], "expected": 42}]}
    if entry_point is None:
        hidden = {"kind": "io", "cases": [{"id": "h1", "stdin": "secret-input\n", "expected_stdout": "42\n"}]}
    return Task.model_validate(
        {"task_id": "T/1", "prompt": "p", "entry_point": entry_point, "public_tests": public, "hidden_tests": hidden,
         "limits": {"timeout_s": 5, "memory_mb": 256}}
    )  # fmt: skip


CALL = {
    "kind": "call",
    "cases": [{"id": "c1", "args": [1, 2], "expected": 3}, {"id": "c2", "args": [2, 2], "expected": 5}],
}


def context(tmp_path: Path, role: str, t: Task, store: ArtifactStore | None) -> RoleContext:
    registry = TaskRegistry(tmp_path / "tasks")
    registry.store([t])
    return RoleContext(role=role, worker="host:1", tasks=TaskSource(registry), artifacts=store, output_topic="out")


def event(code: str | None, **kw: Any) -> GenerationEvent:
    values: dict[str, Any] = {"generation_id": "g1", "episode_id": "g1", "run_id": "r", "task_id": "T/1",
                              "policy_version": "p", "code": code, **kw}  # fmt: skip
    return GenerationEvent(**values)


# ---- the harness reports the candidate's output -------------------------------------------------------------


def test_call_suite_output_is_the_candidates_not_the_protocol() -> None:
    code = "import sys\nprint('loading')\ndef add(a, b):\n    print('adding', a, b)\n    print('oops', file=sys.stderr)\n    return a + b\n"  # noqa: E501
    t = task(CALL)
    public_tests = public_suite(t)
    assert public_tests is not None
    ran = local_grader(LocalRunner()).run_suites(code, "add", [("public", public_tests)], t.limits)
    assert ran.protocol_error is None
    assert [c.status for c in ran.outcomes[0].cases] == ["passed", "failed"]
    out = ran.output
    assert out.stdout == b"loading\nadding 1 2\nadding 2 2\n"
    assert out.stderr == b"oops\noops\n"
    assert (out.stdout_bytes, out.stderr_bytes) == (len(out.stdout), len(out.stderr))
    assert not out.stdout_truncated
    assert MAGIC not in out.stdout


def test_assert_check_code_output_is_not_the_candidates() -> None:
    check = "def check(candidate):\n    print('CHECK-ONLY 3')\n    assert candidate(1, 2) == 3\n"
    t = task({"kind": "assert", "code": check})
    public_tests = public_suite(t)
    assert public_tests is not None
    code = "def add(a, b):\n    print('from candidate')\n    return a + b\n"
    ran = local_grader(LocalRunner()).run_suites(code, "add", [("public", public_tests)], t.limits)
    assert ran.outcomes[0].all_passed
    assert ran.output.stdout == b"from candidate\n"


def test_io_suite_output_is_captured_per_case_in_order() -> None:
    cases = [{"stdin": "1\n", "expected_stdout": "1\n"}, {"stdin": "2\n", "expected_stdout": "2\n"}]
    t = task({"kind": "io", "cases": cases}, entry_point=None)
    public_tests = public_suite(t)
    assert public_tests is not None
    code = "import sys\nx = input()\nprint(x)\nprint('e' + x, file=sys.stderr)\n"
    ran = local_grader(LocalRunner()).run_suites(code, None, [("public", public_tests)], t.limits)
    assert ran.outcomes[0].all_passed
    assert ran.output == CandidateOutput(b"1\n2\n", b"e1\ne2\n", 4, 6)


def test_output_beyond_the_harness_cap_keeps_the_tail_and_says_so() -> None:
    code = "def add(a, b):\n    print('A' * 100 + 'B' * (2 << 20), end='')\n    return a + b\n"
    t = task({"kind": "call", "cases": [{"args": [1, 2], "expected": 3}]})
    public_tests = public_suite(t)
    assert public_tests is not None
    ran = local_grader(LocalRunner()).run_suites(code, "add", [("public", public_tests)], t.limits)
    assert ran.outcomes[0].all_passed, "a big print must not cost the candidate its verdict"
    assert ran.output.stdout_bytes == 100 + (2 << 20)
    assert ran.output.stdout == b"B" * harness.OUTPUT_CAP
    assert ran.output.stdout_truncated


def test_a_candidate_printing_without_end_does_not_stall_the_run() -> None:
    code = (
        "import _thread\n"  # a builtin module: LocalRunner as root finds no stdlib outside the sandbox
        "started = _thread.allocate_lock()\n"
        "started.acquire()\n"
        "def spam():\n"
        "    print('z' * 1000, flush=True)\n"
        "    started.release()\n"
        "    while True:\n"
        "        print('z' * 1000)\n"
        "_thread.start_new_thread(spam, ())\n"
        "started.acquire()\n"
        "def add(a, b):\n"
        "    return a + b\n"
    )
    t = task(CALL)
    public_tests = public_suite(t)
    assert public_tests is not None
    ran = local_grader(LocalRunner()).run_suites(code, "add", [("public", public_tests)], t.limits)
    assert [c.status for c in ran.outcomes[0].cases] == ["passed", "failed"]
    assert ran.run.measured.wall_ms < 4000
    assert 1001 <= len(ran.output.stdout) <= harness.OUTPUT_CAP
    assert set(ran.output.stdout) <= set(b"z\n")


def test_split_output_takes_only_this_runs_framed_records() -> None:
    nonce = b"n" * 32
    frame = MAGIC + b" " + nonce + b" "
    record = b'{"output":"stdout","b64":"aGk=","bytes":2}'
    other = MAGIC + b" " + b"x" * 32 + b' {"output":"stderr","b64":"","bytes":0}'
    stdout = b"\n".join(
        [frame + b'{"hello":true}', frame + record, other, frame + b'{"output":"stderr","b64":"","bytes":9}']
    )
    rest, out = split_output(stdout, nonce)
    assert out == CandidateOutput(b"hi", b"", 2, 9)
    assert out.stderr_truncated
    assert not out.stdout_truncated
    assert rest == b"\n".join([frame + b'{"hello":true}', other])
    # No record for a stream: nothing was written to it when the harness finished, unknown when it did not.
    rest, only_stdout = split_output(frame + record, nonce)
    assert only_stdout == CandidateOutput(b"hi", b"", 2, 0)
    _, cut = split_output(frame + record, nonce, reported=False)
    assert cut.stderr_truncated
    bad = frame + b'{"output":"stdout","b64":"!!","bytes":2}'
    assert split_output(bad, nonce) == (bad, CandidateOutput())


def test_output_written_before_a_hang_is_kept() -> None:
    # Block-buffered like any Python writing to a pipe: what the candidate flushed before it was killed.
    code = (
        "def add(a, b):\n    print('before the hang', flush=True)\n    print('lost')\n    while True:\n        pass\n"
    )
    t = task({"kind": "call", "cases": [{"args": [1, 2], "expected": 3}]})
    public_tests = public_suite(t)
    assert public_tests is not None
    ran = local_grader(LocalRunner()).run_suites(
        code, "add", [("public", public_tests)], t.limits.model_copy(update={"timeout_s": 1})
    )
    assert ran.outcomes[0].cases[0].status == "timeout"
    assert ran.output.stdout == b"before the hang\n"  # the harness killed the case and still reported
    assert not ran.output.stdout_truncated


def test_inline_output_is_the_tail() -> None:
    assert output_tail(b"short", False) == ("short", False)
    assert output_tail(b"short", True) == ("short", True)
    long = b"a" * 10 + b"z" * OUTPUT_TAIL_MAX_CHARS
    assert output_tail(long, False) == ("z" * OUTPUT_TAIL_MAX_CHARS, True)
    assert output_tail(b"\xff ok", False) == ("\ufffd ok", False)


# ---- the executor and verifier store artifacts ---------------------------------------------------------


def test_executor_stores_code_cases_and_cut_output(tmp_path: Path) -> None:
    s3 = MemoryS3()
    store = ArtifactStore(s3, "arts")
    store.start()
    code = "def add(a, b):\n    print('x' * 10000)\n    print('tail')\n    return a + b\n"
    t = task(CALL)
    done = ExecutorHandler(context(tmp_path, "executor", t, store), local_grader(LocalRunner())).handle(
        event(code), SOURCE
    )
    assert isinstance(done, Done)
    result = decode((done.outputs[0].value or b""), ExecutionResult)
    assert set(result.artifacts) == {"code", "cases", "stdout"}
    full = ("x" * 10000 + "\ntail\n") * 2
    assert result.stdout_truncated
    assert result.stdout == full[-OUTPUT_TAIL_MAX_CHARS:]
    assert s3.get(result.artifacts["stdout"]).decode() == full
    assert s3.get(result.artifacts["code"]).decode() == code
    assert result.artifacts["code"] == store.url_for(hashlib.sha256(code.encode()).hexdigest())
    assert orjson.loads(s3.get(result.artifacts["cases"])) == [c.model_dump(mode="json") for c in result.cases]
    assert done.log is not None
    assert done.log.fields["stdout_url"] == result.artifacts["stdout"]
    assert done.log.fields["stdout_bytes"] == len(full)

    # The same run again: everything is already there, so no request at all reaches S3.
    before = len(s3.requests)
    again = ExecutorHandler(context(tmp_path / "2", "executor", t, store), local_grader(LocalRunner())).handle(
        event(code), SOURCE
    )
    assert isinstance(again, Done)
    assert decode((again.outputs[0].value or b""), ExecutionResult).artifacts == result.artifacts
    assert len(s3.requests) == before


def test_small_output_stays_inline_only_and_no_store_means_no_artifacts(tmp_path: Path) -> None:
    s3 = MemoryS3()
    store = ArtifactStore(s3, "arts")
    code = "def add(a, b):\n    print('hi')\n    return a + b\n"
    t = task(CALL)
    done = ExecutorHandler(context(tmp_path, "executor", t, store), local_grader(LocalRunner())).handle(
        event(code), SOURCE
    )
    assert isinstance(done, Done)
    result = decode((done.outputs[0].value or b""), ExecutionResult)
    assert (result.stdout, result.stdout_truncated, result.stderr) == ("hi\nhi\n", False, "")
    assert set(result.artifacts) == {"code", "cases"}
    bare = ExecutorHandler(context(tmp_path / "2", "executor", t, None), local_grader(LocalRunner())).handle(
        event(code), SOURCE
    )
    assert isinstance(bare, Done)
    assert decode((bare.outputs[0].value or b""), ExecutionResult).artifacts == {}


def test_code_ref_already_under_our_content_key_is_not_uploaded_again(tmp_path: Path) -> None:
    s3 = MemoryS3()
    store = ArtifactStore(s3, "arts")
    ref = store.put_text(ADD)
    s3.requests.clear()
    t = task(CALL)
    ev = event(None, code_ref=ref.url, code_sha256=ref.sha256)
    done = ExecutorHandler(context(tmp_path, "executor", t, store), local_grader(LocalRunner())).handle(ev, SOURCE)
    assert isinstance(done, Done)
    assert decode((done.outputs[0].value or b""), ExecutionResult).artifacts["code"] == ref.url
    assert s3.requests.count("put") == 1  # the cases; the code is the object the trainer stored


def test_verifier_cases_hold_statuses_only_and_its_output_is_not_kept(tmp_path: Path) -> None:
    s3 = MemoryS3()
    store = ArtifactStore(s3, "arts")
    t = task({"kind": "io", "cases": [{"stdin": "1\n", "expected_stdout": "1\n"}]}, entry_point=None)
    code = "x = input()\nprint('echo:' + x * 5000)\n"
    done = VerifierHandler(context(tmp_path, "verifier", t, store), local_grader(LocalRunner())).handle(
        event(code), SOURCE
    )
    assert isinstance(done, Done)
    verdict = decode((done.outputs[0].value or b""), HiddenVerdict)
    assert set(verdict.artifacts) == {"code", "cases"}
    assert orjson.loads(s3.get(verdict.artifacts["cases"])) == [{"case_id": "h1", "status": "failed"}]
    stored = b"".join(s3.objects.values())
    assert b"secret-input" not in stored
    assert b"42" not in s3.get(verdict.artifacts["cases"])


# ---- uploads during an outage ---------------------------------------------------------------------------


def test_upload_cut_short_by_stop_never_finishes_and_a_refusal_fails(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    s3 = MemoryS3()
    stop = threading.Event()
    store = ArtifactStore(s3, "arts", retry=RetryPolicy.until_stopped(), stop=stop)
    retried = threading.Event()
    store._on_retry = lambda _exc: retried.set()
    s3.fail = ConnectionRefusedError("S3 is down")
    with ThreadPoolExecutor(2) as pool:
        ctx = RoleContext(role="executor", worker="w", tasks=None, artifacts=store, output_topic="o", uploads=pool)  # type: ignore[arg-type]
        artifacts: dict[Any, str] = {}
        pending = ctx.store(artifacts, "stdout", b"must not be lost")
        assert pending is not None
        assert retried.wait(10), "the outage was not retried"
        assert not pending.done()
        stop.set()
    assert not pending.done(), "an upload the stop cut short must leave its result uncommitted"
    assert artifacts["stdout"].startswith("s3://arts/sha256/")

    s3.fail = S3Error(None, "AccessDenied", "denied", "k", "r", "h")  # type: ignore[arg-type]
    refused = ArtifactStore(s3, "arts", retry=RetryPolicy.until_stopped())
    with ThreadPoolExecutor(1) as pool:
        ctx = RoleContext(role="executor", worker="w", tasks=None, artifacts=refused, output_topic="o", uploads=pool)  # type: ignore[arg-type]
        failed = ctx.store({}, "code", b"x")
        assert failed is not None
        with pytest.raises(ArtifactError, match="AccessDenied"):
            failed.result(timeout=10)


def test_outage_errors_say_so() -> None:
    s3 = MemoryS3()
    s3.fail = ConnectionRefusedError("down")
    store = ArtifactStore(s3, "arts", retry=RetryPolicy(0.01, 0.02, max_elapsed_s=0.1))
    with pytest.raises(ArtifactError, match="still failing after") as info:
        store.put(b"x")
    assert info.value.outage

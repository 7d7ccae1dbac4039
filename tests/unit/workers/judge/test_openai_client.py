"""The OpenAI-compatible judge client against a fake chat-completions server on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from pydantic import SecretStr

from workers.judge.base import JudgeError, JudgeRequest
from workers.judge.openai_client import OpenAIJudge, OpenAIJudgeConfig


class FakeServer:
    """Answers from a script: each entry is (status, body); the last one repeats. Records requests."""

    def __init__(self) -> None:
        self.script: list[tuple[int, Any]] = []
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.release.set()


@pytest.fixture
def server() -> Iterator[tuple[FakeServer, str]]:
    fake = FakeServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with fake.lock:
                fake.requests.append((dict(self.headers), body))
                status, reply = fake.script[min(len(fake.requests) - 1, len(fake.script) - 1)]
                fake.in_flight += 1
                fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
            fake.release.wait(5)
            with fake.lock:
                fake.in_flight -= 1
            data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def chat(content: str) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": content}}]}


REQ = JudgeRequest(task_id="T/1", prompt="def f(x):\n", entry_point="f", code="def f(x):\n    return x\n")


def judge(url: str, **kw: Any) -> OpenAIJudge:
    config = OpenAIJudgeConfig(base_url=url, model="qwen-judge", api_key=SecretStr("sk-secret"), timeout_s=2,
                               retries=2, backoff_s=0.0, **kw)  # fmt: skip
    return OpenAIJudge(config, sleep=lambda _s: None)


def test_scores_and_sends_model_rubric_and_key(server: tuple[FakeServer, str]) -> None:
    fake, url = server
    fake.script = [(200, chat('{"score": 8, "rationale": "clear and correct"}'))]
    got = judge(url).score(REQ)
    assert got.score == pytest.approx(0.8)
    assert got.rationale == "clear and correct"
    assert got.model == "qwen-judge"
    headers, body = fake.requests[0]
    assert headers["Authorization"] == "Bearer sk-secret"
    assert body["model"] == "qwen-judge"
    assert body["temperature"] == 0.0
    assert body["messages"][0]["role"] == "system"
    assert "return x" in body["messages"][1]["content"]


def test_retries_overload_then_succeeds(server: tuple[FakeServer, str]) -> None:
    fake, url = server
    fake.script = [(503, {"error": "busy"}), (429, {"error": "slow down"}), (200, chat("Score: 6/10"))]
    got = judge(url).score(REQ)
    assert got.score == pytest.approx(0.6)
    assert len(fake.requests) == 3


def test_gives_up_with_an_error_outcome_never_the_key(server: tuple[FakeServer, str]) -> None:
    fake, url = server
    fake.script = [(500, {"error": "boom"})]
    got = judge(url).score(REQ)
    assert got.score is None
    assert got.error is not None
    assert "3 attempts" in got.error
    assert "sk-secret" not in got.error
    assert len(fake.requests) == 3


def test_client_errors_are_not_retried(server: tuple[FakeServer, str]) -> None:
    fake, url = server
    fake.script = [(401, {"error": "bad key"})]
    got = judge(url).score(REQ)
    assert got.error == "judge server refused the request: HTTP 401"
    assert len(fake.requests) == 1


@pytest.mark.parametrize("reply", [chat("looks fine to me"), {"choices": []}, b"<html>oops</html>"])
def test_unusable_answers_are_errors(server: tuple[FakeServer, str], reply: Any) -> None:
    fake, url = server
    fake.script = [(200, reply)]
    got = judge(url).score(REQ)
    assert got.score is None
    assert got.error


def test_connection_refused_is_an_error_outcome() -> None:
    got = judge("http://127.0.0.1:9/v1").score(REQ)
    assert got.score is None
    assert "attempts" in (got.error or "")


def test_concurrency_limit(server: tuple[FakeServer, str]) -> None:
    fake, url = server
    fake.script = [(200, chat("7"))]
    fake.release.clear()
    client = judge(url, concurrency=2)
    threads = [threading.Thread(target=client.score, args=(REQ,)) for _ in range(6)]
    for thread in threads:
        thread.start()
    try:
        import time

        deadline = time.monotonic() + 5
        while fake.in_flight < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        fake.release.set()
        for thread in threads:
            thread.join(10)
    assert fake.max_in_flight == 2
    assert len(fake.requests) == 6


def test_rejects_non_http_urls() -> None:
    with pytest.raises(JudgeError):
        OpenAIJudge(OpenAIJudgeConfig(base_url="file:///etc/passwd", model="m"))


def test_lone_surrogates_in_the_judges_answer_are_repaired(server: tuple[FakeServer, str]) -> None:
    """A candidate may talk the judge into echoing lone surrogates; they never reach a JudgeScore."""
    fake, url = server
    fake.script = [
        (200, b'{"choices": [{"message": {"content": "{\\"score\\": 7, \\"rationale\\": \\"x\\\\ud800\\"}"}}]}')
    ]
    got = judge(url).score(REQ)
    assert got.score == pytest.approx(0.7)
    assert got.rationale == "x\ufffd"


def test_an_episodes_transcript_goes_into_the_chat() -> None:
    from dataclasses import replace

    from workers.judge.base import TranscriptStep

    steps = (TranscriptStep(1, "exec", "python -m pytest -q", "nonzero_exit", 1),)
    chat_judge = OpenAIJudge(OpenAIJudgeConfig(base_url="http://127.0.0.1:1", model="m"))
    one_shot = chat_judge.messages(REQ)[1]["content"]
    episode = chat_judge.messages(replace(REQ, transcript=steps))[1]["content"]
    assert "transcript" not in one_shot
    assert episode.startswith(one_shot)
    assert "turn 1 exec python -m pytest -q: nonzero_exit (exit 1)" in episode

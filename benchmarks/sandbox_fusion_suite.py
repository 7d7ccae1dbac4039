"""SandboxFusion's own runner tests, unmodified, against the gateway over HTTP: issue 15's drop-in proof.

Why a harness and not a port: the peer's suite is the judge, so its ``sandbox/tests/runners/test_<lang>.py``
files run byte for byte as they are in a SandboxFusion checkout (none of its code is in this repository;
give ``--checkout``). They import SandboxFusion's server (``sandbox.server.server.app``, driven in-process with
``fastapi.testclient.TestClient``) and its models; a shim package on ``sys.path`` provides those names: the
models from the ``sandbox-fusion`` PyPI client (``sandbox_fusion.models``) and, as ``app``, an ASGI app that
forwards each request over real HTTP (httpx) to the gateway, so every test reaches rewardstream through the
network, Kafka and an executor like any client.

    .venv/bin/python -m benchmarks.sandbox_fusion_suite --checkout /tmp/SandboxFusion [--gateway URL] [--json OUT]

Each file runs in its own pytest process (per-file counts from its JUnit XML). Files that need a GPU or the
public internet, another endpoint, or a language no runner here has are listed as not run, with why.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import typing
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, create_model

from schemas.errors import ValidationError
from workers.languages import resolve

REPO = Path(__file__).resolve().parent.parent

RUNNERS = "sandbox/tests/runners"
#: Files left out whatever this service runs: the issue's "leave out only what needs the public internet or a GPU",
#: and what is not ``/run_code`` at all.
NOT_RUN = {
    "test_cuda.py": "needs a GPU (nvcc and a CUDA device)",
    "test_python_gpu.py": "needs a GPU (CUDA)",
    "test_lean.py": "needs Mathlib, fetched from the public internet (lake); not in Debian",
    "test_swift.py": "swift is not packaged in Debian bookworm",
    "test_julia.py": "julia is not packaged in Debian bookworm",
    "test_jupyter.py": "drives /run_jupyter (a Jupyter kernel per request), not /run_code",
    "test_jest.py": "no jest mode here: its tests are TypeScript, which Debian's jest needs a TypeScript "
    "transform for (ts-jest or babel's TypeScript preset), not wired up",
}
#: Single tests left out of a file that runs, each with why (passed to pytest as ``--deselect``).
DESELECTED = {
    "test_isolation.py": {
        "test_isolation_network_external_access": "expects the public internet to answer; every run here has "
        "its network off by design (a loopback of its own only)",
    },
}
#: What the shim package holds: SandboxFusion's module paths, re-exporting the PyPI client's models.
SHIM = {
    "sandbox/__init__.py": "",
    "sandbox/runners/__init__.py": "from sandbox_fusion.models import CommandRunStatus as CommandRunStatus\n",
    "sandbox/server/__init__.py": "",
    "sandbox/server/sandbox_api.py": (
        "from sandbox_fusion.models import RunStatus as RunStatus\n\n"
        "from benchmarks.sandbox_fusion_suite import client_models\n\n"
        "_models = client_models()\n"
        'RunCodeRequest = _models["RunCodeRequest"]\n'
        'RunCodeResponse = _models["RunCodeResponse"]\n'
        'RunJupyterRequest = _models["RunJupyterRequest"]\n'
        'RunJupyterResponse = _models["RunJupyterResponse"]\n'
    ),
    "sandbox/server/server.py": (
        "import os\n\nfrom benchmarks.sandbox_fusion_suite import forwarding_app\n\n"
        'app = forwarding_app(os.environ["RS_SF_GATEWAY"])\n'
    ),
    "sandbox/utils/__init__.py": "",
    "sandbox/utils/logging.py": "def configure_logging() -> None:\n    pass\n",
    # Their markers (``minor``, ``cuda``, ...) are registered so a file runs with no warnings of ours.
    "pytest.ini": "[pytest]\nmarkers =\n    minor\n    cuda\n    lean\n    verilog\n    jupyter\n",
    # their suite runs with pytest-asyncio's asyncio_mode = "auto": an ``async def`` test runs in a fresh loop
    "conftest.py": (
        "import asyncio\nimport inspect\n\nimport pytest\n\n\n@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_pyfunc_call(pyfuncitem):\n"
        "    if not inspect.iscoroutinefunction(pyfuncitem.obj):\n        return None\n"
        "    names = pyfuncitem._fixtureinfo.argnames\n"
        "    asyncio.run(pyfuncitem.obj(**{n: pyfuncitem.funcargs[n] for n in names}))\n    return True\n"
    ),
}
_HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def _swap(annotation: Any, done: dict[type, type[BaseModel]]) -> Any:
    """``annotation`` with every client (pydantic v1) model in it replaced by its v2 twin."""
    if isinstance(annotation, type) and annotation in done:
        return done[annotation]
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if not args or origin is typing.Literal:
        return annotation
    swapped = tuple(_swap(a, done) for a in args)
    if swapped == args:
        return annotation
    if origin is typing.Union:
        return typing.Union[swapped]  # noqa: UP007 - rebuilt from its parts
    return origin[swapped]


def client_models() -> dict[str, type[BaseModel]]:
    """The ``sandbox-fusion`` client's models (``sandbox_fusion.models``, pydantic v1 there) as pydantic v2
    models with the same fields, types and defaults: SandboxFusion's server and tests are on v2
    (``model_dump``)."""
    import sandbox_fusion.models as client
    from pydantic.v1 import BaseModel as BaseModelV1

    done: dict[type, type[BaseModel]] = {}
    pending = [c for c in vars(client).values() if isinstance(c, type) and issubclass(c, BaseModelV1)]
    pending = [c for c in pending if c is not BaseModelV1]
    while pending:  # dependencies first: a model is built once every model its fields name is
        before = len(pending)
        for cls in list(pending):
            hints = typing.get_type_hints(cls)
            named = [m for m in pending if m is not cls and m.__name__ in repr(hints)]
            if named:
                continue
            fields: dict[str, Any] = {
                name: (_swap(hints[name], done), ... if f.required else f.default) for name, f in cls.__fields__.items()
            }
            done[cls] = create_model(cls.__name__, **fields)
            pending.remove(cls)
        if len(pending) == before:
            raise RuntimeError(f"cannot order the client's models: {[c.__name__ for c in pending]}")
    return {cls.__name__: model for cls, model in done.items()}


def forwarding_app(gateway: str, timeout_s: float = 300.0) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """An ASGI app that sends every HTTP request it gets to ``gateway`` over the network and answers with
    what came back (status, headers, body): SandboxFusion's in-process ``TestClient(app)`` then tests the
    gateway, not an app in the test's process."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # nothing to start or stop
            while True:
                kind = (await receive())["type"].rsplit(".", 1)[-1]
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k.decode().lower() not in _HOP_HEADERS]
        query = scope.get("query_string", b"").decode()
        url = gateway.rstrip("/") + scope["path"] + (f"?{query}" if query else "")
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            response = await client.request(scope["method"], url, content=bytes(body), headers=headers)
        out = [(k.encode(), v.encode()) for k, v in response.headers.items() if k.lower() not in _HOP_HEADERS]
        await send({"type": "http.response.start", "status": response.status_code, "headers": out})
        await send({"type": "http.response.body", "body": response.content})

    return app


@dataclass
class FileResult:
    """One test file: what ran and how it went (``reason`` says why it was not run)."""

    file: str
    language: str
    run: bool
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    reason: str = ""
    failures: dict[str, str] = field(default_factory=dict)
    deselected: dict[str, str] = field(default_factory=dict)


def language_of(source: str) -> str:
    """The language a runner test file sends (its first ``language='...'``)."""
    found = re.search(r"language\s*=\s*['\"]([^'\"]+)['\"]", source)
    return found.group(1) if found else "?"


def why_not_run(name: str, language: str) -> str | None:
    """Why ``name`` is left out, or None when it runs: the fixed list, then a language with no runner here."""
    if name in NOT_RUN:
        return NOT_RUN[name]
    try:
        resolve(language)
    except ValidationError:
        return f"no runner for `{language}` here"
    return None


def _counts(report: Path, result: FileResult) -> None:
    root = ET.parse(report).getroot()  # noqa: S314 - written by our own pytest child a moment ago
    for case in root.iter("testcase"):
        failed = case.find("failure") if case.find("failure") is not None else case.find("error")
        if failed is not None:
            result.failed += 1
            message = (failed.get("message") or failed.text or "").strip().splitlines()
            result.failures[case.get("name", "?")] = (message[0] if message else "")[:300]
        elif case.find("skipped") is not None:
            result.skipped += 1
        else:
            result.passed += 1


def run_file(test: Path, work: Path, gateway: str, timeout_s: float) -> FileResult:
    """Run one unmodified test file with pytest against the gateway (through the shim in ``work``)."""
    source = test.read_text(encoding="utf-8")
    result = FileResult(test.name, language_of(source), run=False)
    reason = why_not_run(test.name, result.language)
    if reason is not None:
        result.reason = reason
        return result
    result.run = True
    copy = work / "runners" / test.name
    shutil.copyfile(test, copy)  # byte for byte: the file under test is theirs
    report = work / (test.stem + ".xml")
    env = {**os.environ, "RS_SF_GATEWAY": gateway, "PYTHONPATH": os.pathsep.join([str(work), str(REPO)])}
    result.deselected = DESELECTED.get(test.name, {})
    argv = [
        sys.executable, "-m", "pytest", "-c", str(work / "pytest.ini"), "--rootdir", str(work),
        "-p", "no:cacheprovider", "-q", f"--junitxml={report}", str(copy),
        *(f"--deselect=runners/{test.name}::{name}" for name in result.deselected),
    ]  # fmt: skip
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        result.reason = f"pytest did not finish within {timeout_s:g} s"
        result.failed = 1
        return result
    result.seconds = round(time.monotonic() - started, 1)
    if report.is_file():
        _counts(report, result)
    if result.passed + result.failed + result.skipped == 0:
        result.failed = 1
        result.reason = "pytest ran nothing: " + proc.stdout.decode(errors="replace")[-300:]
    return result


def run_suite(checkout: Path, gateway: str, only: list[str], timeout_s: float) -> list[FileResult]:
    """Every ``test_*.py`` of the checkout's runner tests (or those ``only`` names), in name order."""
    runners = checkout / RUNNERS
    if not runners.is_dir():
        raise SystemExit(f"no {RUNNERS} under {checkout}: give an extracted SandboxFusion tree")
    tests = sorted(runners.glob("test_*.py"))
    if only:
        tests = [t for t in tests if t.stem.removeprefix("test_") in only or t.name in only]
    with tempfile.TemporaryDirectory(prefix="rs-sf-suite-") as tmp:
        work = Path(tmp)
        for rel, text in SHIM.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(text)
        (work / "runners").mkdir()
        return [run_file(test, work, gateway, timeout_s) for test in tests]


def table(results: list[FileResult]) -> str:
    """The per-file table and the total, as Markdown."""
    lines = ["| file | language | passed | failed | skipped | note |", "|---|---|---|---|---|---|"]
    for r in results:
        if r.run:
            notes = [f"{k}: {v[:120]}" for k, v in r.failures.items()] or ([r.reason] if r.reason else [])
            notes += [f"left out `{k}`: {v}" for k, v in r.deselected.items()]
            note = "; ".join(notes)
            lines.append(f"| {r.file} | {r.language} | {r.passed} | {r.failed} | {r.skipped} | {note} |")
        else:
            lines.append(f"| {r.file} | {r.language} | - | - | - | not run: {r.reason} |")
    ran = [r for r in results if r.run]
    passed, failed, skipped = (sum(getattr(r, k) for r in ran) for k in ("passed", "failed", "skipped"))
    lines.append(
        f"| **total** ({len(ran)} files run, {len(results) - len(ran)} not run) | | {passed} | {failed} | {skipped} | |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the suite; exit 1 if any test that ran failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--checkout", type=Path, required=True, help="an extracted SandboxFusion tree")
    parser.add_argument("--gateway", default="http://127.0.0.1:8080", help="the gateway's base URL")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    parser.add_argument("--only", nargs="*", default=[], help="only these files (e.g. python java)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per file")
    args = parser.parse_args(argv)
    results = run_suite(args.checkout, args.gateway, args.only, args.timeout)
    print(table(results))
    if args.json is not None:
        ran = [r for r in results if r.run]
        total = {k: sum(getattr(r, k) for r in ran) for k in ("passed", "failed", "skipped")}
        payload = {"gateway": args.gateway, "files": [asdict(r) for r in results], "total": total}
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())

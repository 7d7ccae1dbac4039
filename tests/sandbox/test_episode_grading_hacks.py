"""Hacks on an episode's submit (planted files, shadowing, links, setuid, bad snapshots): each earns 0."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from schemas.codec import decode
from schemas.events import HiddenVerdict
from schemas.tasks import task_version
from tests.sandbox.episode_grading_env import (
    FRACTIONS_SHADOW,
    PATCH_ADD,
    PTH_ADD,
    PYC,
    SOURCE,
    USER_SITE,
    Roles,
    assert_failed,
    episode_done,
    unchecked_pyc,
)
from tests.sandbox.swe_task import (
    OPS_BUGGY,
    OPS_FIXED,
    snapshot,
    with_member,
)
from workers.artifacts import ArtifactError, ArtifactStore
from workers.roles.workspace import Graded

pytestmark = pytest.mark.sandbox

#: A host path that exists wherever the tests run: this checkout (its task registry, its code).
HOST_CHECKOUT = str(Path(__file__).resolve().parents[2])
HACKS: dict[str, Callable[[], bytes]] = {
    "edit the public tests": lambda: snapshot({"tests/test_ops.py": "import unittest\n"}),
    "delete the public tests": lambda: snapshot({}, drop=("tests/test_ops.py", "tests/__init__.py")),
    "plant conftest.py": lambda: snapshot({"conftest.py": PATCH_ADD, "tests/conftest.py": PATCH_ADD}),
    "plant pytest.ini": lambda: snapshot({"pytest.ini": "[pytest]\naddopts = -p hack\n", "hack.py": PATCH_ADD}),
    "plant sitecustomize.py": lambda: snapshot({"sitecustomize.py": PATCH_ADD}),
    "plant usercustomize.py": lambda: snapshot(
        {"usercustomize.py": PATCH_ADD, f"{USER_SITE}/usercustomize.py": PATCH_ADD}
    ),
    "plant a .pth": lambda: snapshot({"calc.pth": PTH_ADD, f"{USER_SITE}/hack.pth": PTH_ADD}),
    "shadow the stdlib module the entry imports": lambda: snapshot({"fractions.py": FRACTIONS_SHADOW}),
    "a __pycache__ pyc for the entry module": lambda: snapshot({PYC: unchecked_pyc(OPS_FIXED, "calc/ops.py")}),
    "a compiled entry module without its source": lambda: snapshot(
        {"calc/ops.pyc": unchecked_pyc(OPS_FIXED, "calc/ops.py")}, drop=("calc/ops.py",)
    ),
    "symlinks to /proc and host paths": lambda: snapshot(
        {},
        links={
            "calc/environ": "/proc/self/environ",
            "calc/root": "/proc/1/root",
            "host": HOST_CHECKOUT,
            "etc": "/etc",
            "calc/fractions.py": "/usr/lib/python3.11/fractions.py",
        },
    ),
    "the tests directory turned into a link to /": lambda: snapshot(
        {}, links={"tests": "/"}, drop=("tests/test_ops.py", "tests/__init__.py")
    ),
    "a setuid file": lambda: with_member(snapshot({}), "calc/suid", b"#!/bin/sh\nid\n", 0o6755),
    # What the code under test does while it is graded: it can only fail itself, never make the run the
    # infrastructure's fault (a sandbox_error would withhold the reward instead of giving 0).
    "kill the grader from the entry module": lambda: snapshot({"calc/ops.py": OPS_BUGGY + KILL_PARENT}),
    "a fork bomb on import": lambda: snapshot({"calc/ops.py": OPS_BUGGY + FORK_BOMB}),
    "fill the disk and inodes on import": lambda: snapshot({"calc/ops.py": OPS_BUGGY + FILL_DISK}),
    "sleep past every deadline": lambda: snapshot({"calc/ops.py": OPS_BUGGY + "import time\ntime.sleep(3600)\n"}),
}
KILL_PARENT = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
FORK_BOMB = """import os, time
for _ in range(1000):
    try:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
    except OSError:
        break
"""
FILL_DISK = """import os
try:
    with open("fill", "wb") as f:
        while True:
            f.write(b"x" * (1 << 20))
except OSError:
    pass
try:
    for i in range(100000):
        open(f"inode{i}", "w").close()
except OSError:
    pass
"""


#: Hacks whose runs end only when their time runs out (a sleep; children that outlive the run and hold its
#: output open): they fail whatever the limit, so their cases get a shorter one and the runs wait out less.
TIMED_OUT_S = {"a fork bomb on import": 2.0, "sleep past every deadline": 2.0}


@pytest.mark.parametrize("kind", ["call", "io"])
@pytest.mark.parametrize(
    ("hack", "roles"), [(hack, TIMED_OUT_S.get(hack)) for hack in HACKS], ids=list(HACKS), indirect=["roles"]
)
def test_hacks_earn_0(roles: Roles, hack: str, kind: str) -> None:
    assert_failed(roles.grade(kind, HACKS[hack]()))


def test_a_setuid_file_loses_its_bits_before_any_run(roles: Roles) -> None:
    fixed = with_member(snapshot({"calc/ops.py": OPS_FIXED}), "calc/suid", b"#!/bin/sh\nid\n", 0o6755)
    graded = roles.grade("call", fixed)  # the workspace is still the agent's fix: graded as such
    assert graded.reward.reward == 1.0
    task_ = roles.tasks["swe/calc-call"]
    got = roles.verifier.workspaces.graded(roles.event("call", fixed), task_, task_version(task_))
    assert isinstance(got, Graded)
    with tarfile.open(fileobj=io.BytesIO(got.workspace.data)) as tar:
        assert tar.getmember("calc/suid").mode == 0o755


def test_a_snapshot_whose_sha_does_not_match_fails_with_the_reason(roles: Roles) -> None:
    fixed = snapshot({"calc/ops.py": OPS_FIXED})
    graded = roles.grade("call", fixed, sha256=hashlib.sha256(b"another workspace").hexdigest())
    assert_failed(graded)
    assert graded.verdict.run.status == "crashed"
    assert "does not match workspace_sha256" in (graded.verdict.run.error or "")
    assert all(c.status == "error" for c in graded.verdict.cases)


def test_a_workspace_ref_that_is_not_our_content_address_is_never_read(
    roles: Roles, minio_client: Any, s3_bucket: str
) -> None:
    """A generation may only name a snapshot stored under its own sha256: never another object of any bucket
    (a task's hidden files, another episode's workspace), even one whose bytes match the sha it gives."""
    fixed = snapshot({"calc/ops.py": OPS_FIXED})
    minio_client.put_object(s3_bucket, "elsewhere/fix.tar", io.BytesIO(fixed), len(fixed))
    event = roles.event("call", fixed).model_copy(update={"workspace_ref": f"s3://{s3_bucket}/elsewhere/fix.tar"})
    verdict = decode(episode_done(roles.verifier.handle(event, SOURCE)), HiddenVerdict)
    assert verdict.passed == 0, verdict
    assert "not its content address" in (verdict.run.error or ""), verdict.run


def test_an_s3_outage_is_retried_never_a_verdict(roles: Roles, minio_client: Any) -> None:
    """No S3 (a port nobody listens on): every role raises the outage for the runtime to retry; none
    publishes a result, so no reward of 0 can come of it."""
    from minio import Minio

    from workers.artifacts import RetryPolicy

    dead = Minio("127.0.0.1:1", access_key="x", secret_key="y", secure=False, region="us-east-1")  # noqa: S106
    down = ArtifactStore(dead, roles.store.bucket, retry=RetryPolicy(initial_s=0.05, max_s=0.1, max_elapsed_s=0.5))
    event = roles.event("call", snapshot({"calc/ops.py": OPS_FIXED}))
    for handler in (roles.verifier, roles.executor, roles.judge):
        handler.workspaces.context = replace(handler.workspaces.context, artifacts=down)
        with pytest.raises(ArtifactError) as raised:
            handler.handle(event, SOURCE)
        assert raised.value.outage, raised.value


@pytest.mark.parametrize("data", [b"not a tar at all", b"\x1f\x8b" + b"\x00" * 64])
def test_a_snapshot_that_cannot_be_unpacked_is_the_agents_failure(roles: Roles, data: bytes) -> None:
    graded = roles.grade("io", data)
    assert_failed(graded)
    assert graded.verdict.run.status == "crashed"
    assert "unusable" in (graded.verdict.run.error or ""), graded.verdict.run
    assert graded.judgement.status == "error"

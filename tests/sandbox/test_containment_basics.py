"""Containment basics on every backend: exit codes, stdin, files, identity, environment and process view."""

from __future__ import annotations

import json
import os

import pytest

from tests.sandbox.containment_env import S, json_out
from workers.sandbox.api import Sandbox

from .conftest import audit, run_py

pytestmark = pytest.mark.sandbox


# --- basics -------------------------------------------------------------------------------------------


def test_hello_ok_and_measured(sandbox: Sandbox) -> None:
    r = run_py(sandbox, "print('hello')")
    assert r.status is S.OK, r
    assert (r.exit_code, r.signal, r.stdout, r.stderr) == (0, None, b"hello\n", b"")
    assert 0 < r.wall_ms < 5000
    assert r.cpu_ms > 0
    assert r.max_rss_kb > 1000
    assert r.backend == sandbox.name


def test_nonzero_exit(sandbox: Sandbox) -> None:
    r = run_py(sandbox, "import sys; print('bye'); sys.exit(3)")
    assert (r.status, r.exit_code, r.signal, r.stdout) == (S.NONZERO_EXIT, 3, None, b"bye\n")


def test_uncaught_exception_is_nonzero_exit(sandbox: Sandbox) -> None:
    r = run_py(sandbox, "raise ValueError('boom')")
    assert (r.status, r.exit_code) == (S.NONZERO_EXIT, 1)
    assert b"ValueError: boom" in r.stderr


def test_stdin_is_delivered(sandbox: Sandbox) -> None:
    data = b"line1\nline2\n" + b"z" * 300_000
    r = run_py(sandbox, "import sys; d = sys.stdin.buffer.read(); print(len(d), d[:11])", stdin=data)
    assert r.status is S.OK
    assert r.stdout == f"{len(data)} {data[:11]!r}\n".encode()


def test_blocking_on_stdin_gets_eof(sandbox: Sandbox) -> None:
    r = run_py(sandbox, "import sys; print(repr(sys.stdin.read())); input()", timeout_s=5)
    assert r.status is S.NONZERO_EXIT
    assert r.stdout == b"''\n"
    assert b"EOFError" in r.stderr
    assert r.wall_ms < 4000


def test_nested_files_and_workdir(sandbox: Sandbox) -> None:
    code = "import os; print(os.getcwd(), open('pkg/data.txt').read())"
    r = run_py(sandbox, code, files={"pkg/data.txt": b"payload"})
    assert (r.status, r.stdout) == (S.OK, b"/work payload\n")


def test_identity_no_privileges(sandbox: Sandbox) -> None:
    code = """
import json, os, socket
st = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)
print(json.dumps({
    'uid': os.getuid(), 'euid': os.geteuid(), 'gid': os.getgid(), 'groups': os.getgroups(),
    'capeff': st['CapEff'].strip(), 'capprm': st['CapPrm'].strip(), 'capbnd': st['CapBnd'].strip(),
    'nnp': st['NoNewPrivs'].strip(), 'seccomp': st['Seccomp'].strip(),
    'fds': sorted(int(f) for f in os.listdir('/proc/self/fd')),
}))
"""
    r = run_py(sandbox, code)
    assert r.status is S.OK, r.stderr
    info = json_out(r)
    assert info["uid"] == info["euid"] == info["gid"] != 0
    assert info["groups"] in ([], [info["gid"]])
    assert info["capeff"] == info["capprm"] == info["capbnd"] == "0000000000000000"
    assert info["nnp"] == "1"
    assert info["seccomp"] == "2"
    # stdin, stdout, stderr and the fd listdir itself opened: nothing inherited from the worker.
    assert info["fds"] == [0, 1, 2, 3]


@pytest.mark.parametrize("backend", ["process", "process_inline"])
def test_process_runs_live_in_a_user_namespace_of_their_own(request: pytest.FixtureRequest, backend: str) -> None:
    """Process backend: the program's user namespace maps only its own uid and gid; host root (and every
    other host id) is unmapped inside, so root-owned files show as the overflow uid and no id can be taken."""
    sandbox: Sandbox = request.getfixturevalue(f"{backend}_sandbox")
    code = """
import json, os
ns = os.readlink('/proc/self/ns/user')
print(json.dumps({
    'uid_map': open('/proc/self/uid_map').read().split(), 'gid_map': open('/proc/self/gid_map').read().split(),
    'usr_owner': os.stat('/usr').st_uid, 'uid': os.getuid(), 'ns': ns,
}))
"""
    r = run_py(sandbox, code)
    assert r.status is S.OK, r.stderr
    info = json_out(r)
    assert len(info["uid_map"]) == 3, info  # exactly one mapping line
    assert len(info["gid_map"]) == 3, info
    inside, outside, count = (int(x) for x in info["uid_map"])
    assert count == 1
    assert info["uid"] == inside
    # The parent namespace is the host's: the map is the identity, and host root is never in it.
    assert outside == inside != 0, "host root must never be mapped into a run"
    assert info["usr_owner"] == 65534, "root-owned files must show as the overflow uid"
    assert info["ns"] != os.readlink("/proc/self/ns/user"), "the run must not share the worker's user namespace"
    assert not audit(sandbox)


def test_clean_environment(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "rs-test-secret-" + os.urandom(8).hex()
    monkeypatch.setenv("RS_TEST_WORKER_SECRET", secret)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    code = """
import os, glob, json
print(json.dumps(sorted(os.environ)), flush=True)
blob = b''
for p in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline') + glob.glob('/proc/*/task/*/environ'):
    try:
        blob += open(p, 'rb').read()
    except OSError:
        pass
print(len(blob))
import sys; sys.stdout.buffer.write(blob)
"""
    r = run_py(sandbox, code, env={"EXTRA": "1"})
    assert r.status is S.OK, r.stderr
    assert secret.encode() not in r.stdout
    keys = json.loads(r.stdout.splitlines()[0])
    assert "RS_TEST_WORKER_SECRET" not in keys
    assert "EXTRA" in keys
    assert not [k for k in keys if k.startswith(("RS_", "AWS", "DOCKER", "KAFKA", "PYTEST"))]


def test_only_own_processes_visible(sandbox: Sandbox) -> None:
    code = """
import os
cmds = []
for p in os.listdir('/proc'):
    if p.isdigit():
        try:
            cmds.append(open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\\0', b' ').decode())
        except OSError:
            pass
print(len(cmds)); print(cmds)
"""
    r = run_py(sandbox, code)
    assert r.status is S.OK
    assert int(r.stdout.splitlines()[0]) <= 3
    assert b"pytest" not in r.stdout
    assert b"dockerd" not in r.stdout

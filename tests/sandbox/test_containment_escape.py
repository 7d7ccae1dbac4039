"""Escape attempts on every backend: network, host files, syscalls, devices, symlinks, seccomp and clock."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.sandbox.containment_env import S, json_out
from workers.sandbox.api import Sandbox, SandboxSpec
from workers.sandbox.seccomp import syscall_numbers

from .conftest import run_py

pytestmark = pytest.mark.sandbox


# --- escape attempts ----------------------------------------------------------------------------------


def test_network_is_empty(sandbox: Sandbox) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.0)
    port = listener.getsockname()[1]
    code = f"""
import json, socket
out = {{}}
def attempt(name, fn):
    try:
        fn(); out[name] = 'connected'
    except OSError as e:
        out[name] = type(e).__name__
attempt('host_loopback', lambda: socket.create_connection(('127.0.0.1', {port}), timeout=2))
attempt('dns', lambda: socket.getaddrinfo('example.com', 80))
attempt('outbound', lambda: socket.create_connection(('192.0.2.1', 80), timeout=2))
attempt('ipv6', lambda: socket.create_connection(('::1', {port}), timeout=2))
s = socket.socket()
attempt('bind_low_port', lambda: s.bind(('0.0.0.0', 80)))
import os; out['ifaces'] = sorted(os.listdir('/sys/class/net')) if os.path.isdir('/sys/class/net') else None
print(json.dumps(out))
"""
    try:
        r = run_py(sandbox, code, timeout_s=15)
        assert r.status is S.OK, r.stderr
        out = json_out(r)
        assert out["host_loopback"] == "ConnectionRefusedError"
        assert out["dns"] == "gaierror"
        assert out["outbound"] in ("OSError", "TimeoutError")
        assert out["ipv6"] in ("ConnectionRefusedError", "OSError")
        assert out["ifaces"] in (None, ["lo"])
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


def test_host_files_invisible(sandbox: Sandbox, tmp_path: Path) -> None:
    secret = "host-secret-" + os.urandom(8).hex()
    secret_file = tmp_path / f"{secret}.txt"
    secret_file.write_text(secret)
    shadow = Path("/etc/shadow").read_text()
    root_hash = next(line for line in shadow.splitlines() if line.startswith("root:"))
    code = f"""
import os, json
out = {{}}
for path in ({str(secret_file)!r}, '/etc/shadow', '/root/.bash_history', '/proc/1/root/etc/shadow',
             '/proc/self/root/../../etc/shadow'):
    try:
        out[path] = open(path).read()
    except OSError as e:
        out[path] = type(e).__name__
hits = []
for root, dirs, files in os.walk('/'):
    if root.startswith(('/proc', '/sys')):
        dirs[:] = []
        continue
    hits += [os.path.join(root, f) for f in files + dirs if {secret!r} in f]
out['hits'] = hits
print(json.dumps(out))
"""
    r = run_py(sandbox, code, timeout_s=60)
    assert r.status is S.OK, r.stderr
    out = json_out(r)
    assert out[str(secret_file)] == "FileNotFoundError"
    assert out["hits"] == []
    assert secret.encode() not in r.stdout.replace(str(secret_file).encode(), b"")
    assert root_hash.encode() not in r.stdout
    assert out["/etc/shadow"] == "PermissionError"


def test_writes_outside_workdir_fail(sandbox: Sandbox) -> None:
    code = """
import json
out = {}
for path in ('/x', '/etc/passwd', '/etc/newfile', '/usr/bin/python3', '/usr/lib/python3.11/os.py',
             '/home/x', '/root/x', '/var/x', '/proc/sys/kernel/hostname', '/sys/x', '/dev/x'):
    try:
        open(path, 'a').write('x'); out[path] = 'written'
    except OSError as e:
        out[path] = e.errno
print(json.dumps(out))
"""
    r = run_py(sandbox, code)
    assert r.status is S.OK, r.stderr
    out = json_out(r)
    assert "written" not in out.values(), out


def test_privileged_syscalls_refused(sandbox: Sandbox) -> None:
    code = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def sys_(name, *args):
    ctypes.set_errno(0)
    rc = getattr(libc, name)(*args)
    out[name] = 0 if rc == 0 else ctypes.get_errno()
sys_('ptrace', 0, 0, 0, 0)              # PTRACE_TRACEME
sys_('unshare', 0x10000000)             # CLONE_NEWUSER
sys_('unshare', 0x00020000)             # CLONE_NEWNS
sys_('mount', b'none', b'/tmp', b'tmpfs', 0, None)
sys_('setuid', 0)
sys_('chroot', b'/tmp')
sys_('sethostname', b'evil', 4)
sys_('mknod', b'/tmp/dev', 0o20666, (1 << 8) | 3)
sys_('setns', os.open('/proc/self/ns/net', os.O_RDONLY), 0)
print(json.dumps(out))
"""
    r = run_py(sandbox, code)
    assert r.status is S.OK, r.stderr
    out = json_out(r)
    assert all(v != 0 for v in out.values()), out


def test_ptrace_attach_refused(sandbox: Sandbox) -> None:
    code = """
import ctypes, os, time, json
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:
    time.sleep(5); os._exit(0)
rc = libc.ptrace(16, pid, 0, 0)  # PTRACE_ATTACH
print(json.dumps({'rc': rc, 'errno': ctypes.get_errno()}))
os.kill(pid, 9)
"""
    r = run_py(sandbox, code)
    assert r.status is S.OK, r.stderr
    assert json_out(r)["rc"] == -1


def test_device_files(sandbox: Sandbox) -> None:
    code = """
import json, os
out = {'dev': sorted(os.listdir('/dev'))}
for path in ('/dev/sda', '/dev/vda', '/dev/mem', '/dev/kmem', '/dev/kmsg', '/dev/port', '/dev/tty'):
    try:
        os.close(os.open(path, os.O_RDONLY)); out[path] = 'opened'
    except OSError as e:
        out[path] = e.errno
out['null'] = open('/dev/null', 'w').write('x')
out['urandom'] = len(open('/dev/urandom', 'rb').read(8))
print(json.dumps(out))
"""
    r = run_py(sandbox, code)
    assert r.status is S.OK, r.stderr
    out = json_out(r)
    for path in ("/dev/sda", "/dev/vda", "/dev/mem", "/dev/kmem", "/dev/kmsg", "/dev/port"):
        assert out[path] != "opened", (path, out)
    assert out["urandom"] == 8
    assert not {"sda", "vda", "mem", "kmsg"} & set(out["dev"])


def test_symlink_tricks(sandbox: Sandbox, tmp_path: Path) -> None:
    secret_file = tmp_path / "host-secret.txt"
    secret_file.write_text("host-secret-content")
    code = f"""
import json, os
out = {{}}
os.symlink({str(secret_file)!r}, 'to_host')
os.symlink('/proc/1/root', 'to_pid1_root')
os.symlink('/', 'to_root')
for name in ('to_host', 'to_pid1_root/etc/hostname', 'to_root/../../../etc/hostname'):
    try:
        out[name] = open(name).read()
    except OSError as e:
        out[name] = type(e).__name__
out['pid1_root'] = sorted(os.listdir('to_pid1_root'))[:50] if os.access('to_pid1_root', os.R_OK) else None
out['root'] = sorted(os.listdir('/'))
print(json.dumps(out))
"""
    r = run_py(sandbox, code)
    assert r.status is S.OK, r.stderr
    out = json_out(r)
    assert out["to_host"] == "FileNotFoundError"
    assert b"host-secret-content" not in r.stdout
    assert "work" in out["root"]


def test_symlinked_spec_file_cannot_redirect_host_writes(sandbox: Sandbox) -> None:
    # A later file in the same spec cannot be written through an earlier one: names are plain paths.
    spec = SandboxSpec(argv=("python3", "-c", "import os; print(sorted(os.listdir('.')))"),
                       files={"a/b.txt": b"1", "c.txt": b"2"})  # fmt: skip
    r = sandbox.run(spec)
    assert (r.status, r.stdout) == (S.OK, b"['a', 'c.txt']\n")
    bad = sandbox.run(SandboxSpec(argv=("true",), files={"../escape": b"x"}))
    assert bad.status is S.SANDBOX_ERROR


def test_seccomp_blocks_kernel_attack_surface(sandbox: Sandbox) -> None:
    nr = syscall_numbers()  # this machine's numbers: the filter is per architecture
    code = f"""
import ctypes, json, socket
libc = ctypes.CDLL(None, use_errno=True)
out = {{}}
def raw(name, nr, *args):
    ctypes.set_errno(0)
    rc = libc.syscall(nr, *args)
    out[name] = 0 if rc >= 0 else ctypes.get_errno()
raw('io_uring_setup', {nr["io_uring_setup"]}, 8, ctypes.create_string_buffer(120))
raw('bpf', {nr["bpf"]}, 0, None, 0)
raw('keyctl', {nr["keyctl"]}, 0, 0)
raw('userfaultfd', {nr["userfaultfd"]}, 0)
raw('perf_event_open', {nr["perf_event_open"]}, None, 0, -1, -1, 0)
try:
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0); out['netlink'] = 0
except OSError as e:
    out['netlink'] = e.errno
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0); out['packet'] = 0
except OSError as e:
    out['packet'] = e.errno
print(json.dumps(out))
"""
    r = run_py(sandbox, code)
    assert r.status is S.OK, r.stderr
    out = json_out(r)
    assert all(v != 0 for v in out.values()), out


def test_clock_tampering_refused(sandbox: Sandbox) -> None:
    code = """
import time, json
out = {}
try:
    time.clock_settime(time.CLOCK_REALTIME, 0); out['settime'] = 0
except OSError as e:
    out['settime'] = e.errno
print(json.dumps(out))
"""
    r = run_py(sandbox, code)
    assert r.status is S.OK, r.stderr
    assert json_out(r)["settime"] != 0

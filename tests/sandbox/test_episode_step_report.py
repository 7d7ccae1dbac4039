"""Agent steps against a forged report: forged frames, output over the cap and a hostile runner's tar."""

from __future__ import annotations

import io
import os
import secrets
import tarfile
import tempfile
from pathlib import Path

import pytest

from schemas.status import SandboxStatus
from tests.sandbox.episode_step_env import CAPS, LIMITS, members, sh, snapshot
from workers.episodes import step as step_module
from workers.episodes.snapshot import pack
from workers.sandbox.api import Sandbox
from workers.sandbox.guest_program import GuestProgram

pytestmark = pytest.mark.sandbox


# --------------------------------------------------------------------------------------------------------
# The report channel


def forged_report(nonce: bytes, tar: bytes) -> bytes:
    prefix = b"@@RSTEP1 " + nonce + b" "
    result = (
        b'{"result":{"exit_code":0,"signal":null,"timed_out":false,"stdout":"","stderr":"","stdout_bytes":0,'
        b'"stderr_bytes":0,"ms":1},"workspace":{"packed":true},"tar_bytes":%d}' % len(tar)
    )
    return (
        prefix
        + b'{"hello":true,"hardened":true,"stdin_ok":true}\n'
        + prefix
        + result
        + b"\n"
        + tar
        + prefix
        + (b'{"done":true}\n')
    )


def test_forged_frames_on_the_commands_stdout_are_just_output(sandbox: Sandbox) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "pwned").write_bytes(b"forged workspace")
        forged_tar = pack(Path(tmp)).data
    forged = forged_report(b"0" * 32, forged_tar)
    snap0 = snapshot({"forged.bin": forged})
    command = (
        "cat forged.bin; "
        "cat forged.bin > /proc/$PPID/fd/1 || echo no-parent-fd >&2; "
        "cat /proc/$PPID/environ > /dev/null || echo no-parent-environ >&2; "
        "head -c 64 /proc/$PPID/mem > /dev/null || echo no-parent-mem >&2; "
        "echo done"
    )
    out = sh(sandbox, snap0, command)
    assert out.status == SandboxStatus.OK
    assert out.workspace_kept
    assert out.stdout == forged + b"done\n"
    for what in (b"no-parent-fd", b"no-parent-environ", b"no-parent-mem"):
        assert what in out.stderr, out.stderr
    assert set(members(out.snapshot)) == {"forged.bin"}


def test_output_over_the_cap_is_truncated(sandbox: Sandbox) -> None:
    out = sh(sandbox, snapshot(), "head -c 200000 /dev/zero | tr '\\0' a; echo err >&2; head -c 100000 /dev/zero >&2")
    cap = LIMITS.output_cap_bytes
    assert out.status == SandboxStatus.OK
    assert out.stdout == b"a" * cap
    assert out.stdout_truncated
    assert out.stderr == (b"err\n" + bytes(cap))[:cap]
    assert out.stderr_truncated
    small = sh(sandbox, snapshot(), "printf 12345")
    assert small.stdout == b"12345"
    assert not small.stdout_truncated
    assert not small.stderr_truncated


# A stand-in for the runner that plays by the wire format but sends back a hostile tar: a compromised runner
# is as bad as it gets, and what it sends is still only the agent's workspace, refused.
HOSTILE_RUNNER = r"""
import os, sys
n = int(sys.argv[1])
buf = b""
while len(buf) < n:
    chunk = os.read(0, n - len(buf))
    if not chunk:
        break
    buf += chunk
prefix = b"@@RSTEP1 " + buf[:32] + b" "
tar = bytes.fromhex(%r)
os.write(1, prefix + b'{"hello":true,"hardened":true,"stdin_ok":true}\n')
os.write(1, prefix + b'{"result":{"exit_code":0,"signal":null,"timed_out":false,"stdout":"","stderr":"",'
         b'"stdout_bytes":0,"stderr_bytes":0,"ms":1},"workspace":{"packed":true},"tar_bytes":%%d}\n' %% len(tar))
os.write(1, tar + prefix + b'{"done":true}\n')
"""


def hostile_tars(escape: Path) -> dict[str, bytes]:
    def build(*entries: tuple[tarfile.TarInfo, bytes]) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for info, data in entries:
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    def info(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, link: str = "") -> tarfile.TarInfo:
        i = tarfile.TarInfo(name)
        i.type, i.size, i.linkname = kind, size, link
        return i

    return {
        "traversal": build((info(f"../../../../../..{escape}", size=5), b"pwned")),
        "absolute": build((info(str(escape), size=5), b"pwned")),
        "through-link": build(
            (info("l", tarfile.SYMTYPE, link=str(escape.parent)), b""), (info(f"l/{escape.name}", size=5), b"pwned")
        ),
        "hard-link": build((info("h", tarfile.LNKTYPE, link="/etc/passwd"), b"")),
        "device": build((info("dev", tarfile.CHRTYPE), b"")),
        "over-caps": build((info("big", size=CAPS.max_bytes + 1), bytes(CAPS.max_bytes + 1))),
        "twice": build((info("a", size=1), b"1"), (info("a", size=1), b"2")),
        "garbage": secrets.token_bytes(4096),
    }


def test_a_forged_tar_is_the_agents_problem(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    escape = Path(tempfile.gettempdir()) / f"rs-step-escape-{secrets.token_hex(6)}"
    snap0 = snapshot({"keep": b"k"})
    for name, tar in hostile_tars(escape).items():
        source = (HOSTILE_RUNNER % tar.hex()).encode()
        hostile = GuestProgram("step_runner.py", source, bytes(16))  # no bytecode: the source runs
        monkeypatch.setattr(step_module, "step_runner", lambda hostile=hostile: hostile)
        out = sh(sandbox, snap0, "true")
        assert out.status == SandboxStatus.OK, (name, out.reason)
        assert not out.workspace_kept, name
        assert out.snapshot == snap0, name
        assert out.reason is not None, (name, out.reason)
        assert "refused" in out.reason, (name, out.reason)
        assert not escape.exists(), name
        assert not os.path.lexists(escape), name
    monkeypatch.undo()
    assert sh(sandbox, snap0, "cat keep").stdout == b"k"

"""The program that runs INSIDE the sandbox for one agent step: a workspace in, one action, a workspace out.

Why it is shaped like this (the same trust argument as ``workers/sandbox/guest/harness.py``):

* The runner ("parent") never runs the agent's code. ``exec`` spawns the command with its stdin on
  /dev/null and its stdout/stderr on pipes the parent reads with caps; no other fd of the parent crosses
  (every fd of ours is close-on-exec, fds above 2 are closed at start). The parent is made non-dumpable
  (``PR_SET_DUMPABLE 0``), so a same-uid process can neither read its memory (the nonce) nor open
  ``/proc/<parent>/fd/*`` (its stdout, the protocol channel). Nothing is written to stdout before the
  nonce is read, and only the parent ever writes there.
* The parent ignores the catchable signals (the command gets them back at its default); SIGKILL or SIGSTOP
  from the command end the run without a report, which the host takes as the agent's doing: the workspace
  stays what it was before the step.
* Before the workspace is packed every other process of the run is SIGKILLed (``kill(-1)``: all that this
  uid may signal in the sandbox's pid namespace except its init and us) and reaped (we are a child
  subreaper), repeatedly, until ``/proc`` shows none of our uid alive: nothing started by the step survives
  it or writes while the tar is made.
* ``pack`` walks the work dir without following anything (links stored as links), drops FIFOs, sockets and
  devices (and names that are not plain UTF-8), keeps only the owner-execute bit, and stops at the caps; the
  host re-validates and re-packs whatever comes back (``workers.episodes.step``), so this tar is never
  trusted, only convenient. It is byte for byte what ``snapshot.pack`` makes of the same directory, so a
  workspace the step left as it was is recognised here (the tar equals the one sent in) and not sent back:
  ``"unchanged": true``, and the host keeps its own copy (a false claim only keeps the previous workspace).
* The workspace is walked one name at a time from an open directory (``Cursor``; a read's ``open_inside``):
  no call resolves a long path and nothing recurses, so restore and pack cost the same per entry at any
  depth, and a read follows links as the kernel does (``MAX_SYMLINKS`` at most: a longer chain or a loop is
  ``rejected``). The cursor goes up through ``..`` only while no other process runs.
* An exec's limit is the CPU time and own time of every process of the run while it runs, never time spent
  waiting for a CPU (``guest.clock``), enforced by the parent with SIGKILL; a command the host starved past
  the ceiling is reported ``"contention": true`` (the host repeats the step: never the agent's failure). The
  outer sandbox enforces the whole run.

Wire format. stdin, after the program (the one loader, ``guest_program``, with argument ``JOB``, its size):
``NONCE`` (32 bytes) ``HEADER`` (one JSON object) ``\\n`` ``DATA`` (``data_bytes``) ``TAR`` (``tar_bytes``).
stdout, only ever these frames, in this order (``F`` is ``@@RSTEP1 <nonce> ``)::

    F {"hello": true, "hardened": bool, "stdin_ok": bool}\\n
    F {"result": {...}, "workspace": {...}, "tar_bytes": N}\\n <N bytes of tar> F {"done": true}\\n

or ``F {"runner_error": "..."}\\n`` after the hello when the job itself is unusable (infrastructure).
``workspace`` is ``{"packed": true, "entries", "bytes", "dropped", ...}`` with the tar (none when it also says
``"unchanged": true``), or ``{"packed": false, "error": null}`` (a read or refused write: unchanged) or
``{"packed": false, "error": "why"}`` (not kept: over the caps, processes left).
Standard library only (and no ``tarfile``: importing it costs more than a whole step): it runs on the
sandbox image's interpreter. Memory: the tar sent in stays until the one made is compared with it, so a run
holds up to two tars besides the workspace's own tmpfs pages.
"""

from __future__ import annotations

import json
import os
import signal
import time

from workers.sandbox.guest.framing import NONCE_LEN, STEP_MAGIC, frame_prefix
from workers.sandbox.guest.plumbing import (
    PR_SET_DUMPABLE,
    become_subreaper,
    prctl_ok,
    read_exact_into,
    run_and_exit,
    write_all,
)
from workers.sandbox.guest.step_errors import JobError, StepError
from workers.sandbox.guest.step_exec import IGNORED_SIGNALS, SWEEP_S, command_argv, run_command, sweep
from workers.sandbox.guest.step_files import do_read, do_write
from workers.sandbox.guest.workspace_snapshot import pack_workspace, restore, same_bytes

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any


class Frames:
    """Nonce-framed records on stdout (fd 1), the only thing ever written there."""

    def __init__(self, nonce: bytes) -> None:
        self.prefix = frame_prefix(nonce, STEP_MAGIC)

    def record(self, obj: dict[str, Any], payload: list[bytes] | None = None) -> None:
        """One record (ASCII JSON: no newline inside), then ``payload``'s chunks as they are."""
        body = json.dumps(obj, separators=(",", ":"), allow_nan=False, ensure_ascii=True).encode()
        write_all(1, self.prefix + body + b"\n")
        for chunk in payload or ():
            write_all(1, chunk)


def split_job(buf: bytearray) -> tuple[dict[str, Any], memoryview, memoryview]:
    """(header, data, tar) of the job after the nonce."""
    end = buf.find(b"\n", NONCE_LEN)
    if end < 0:
        raise JobError("job without a header")
    header = json.loads(bytes(buf[NONCE_LEN:end]))
    if type(header) is not dict:
        raise JobError("job header is not an object")
    n_data, n_tar = int(header["data_bytes"]), int(header["tar_bytes"])
    view = memoryview(buf)[end + 1 :]
    if n_data < 0 or n_tar < 0 or n_data + n_tar != len(view):
        raise JobError("job sizes do not add up")
    return header, view[:n_data], view[n_data:]


def step(job: dict[str, Any], data: memoryview) -> tuple[dict[str, Any], bool]:
    """Carry out the action; (its result, whether the workspace is to be packed). A write or read the
    workspace does not allow is ``rejected``; an OSError of ``exec`` is ours (the agent's are its status)."""
    kind = job.get("kind")
    if kind == "exec":
        return run_command(command_argv(job), float(job["timeout_s"]), int(job["output_cap"])), True
    try:
        if kind == "write":
            return {"ok": True, **do_write(job, bytes(data))}, True
        if kind == "read":
            return {"ok": True, **do_read(job, int(job["read_cap"]))}, False
    except StepError as exc:
        return {"ok": False, "rejected": str(exc)[:2000]}, False
    except OSError as exc:  # ENOSPC, EDQUOT, EACCES...: the action failed, the workspace stays as it was
        return {"ok": False, "rejected": f"{exc.strerror or exc}"[:2000]}, False
    except RecursionError:  # nothing here recurses on a path; were it ever to, it is still the agent's path
        return {"ok": False, "rejected": "the path is too deep to resolve"}, False
    raise JobError(f"unknown action kind {kind!r}")


def main(argv: list[str]) -> int:
    """One step. Exit status is irrelevant: only the frames count."""
    if os.getuid() == 0:  # kill(-1) as root outside a sandbox would end the machine's processes
        raise SystemExit("step_runner: refusing to run as root (it runs only inside a sandbox)")
    hardened = prctl_ok(PR_SET_DUMPABLE, 0) and become_subreaper()
    for sig in IGNORED_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    os.closerange(3, 1 << 16)
    size = int(argv[1])
    buf = bytearray(size)
    got = read_exact_into(0, buf)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the stdin file (a memfd, or docker's /tmp file) is released
    os.close(null)
    out = Frames(bytes(buf[:NONCE_LEN]))
    out.record({"hello": True, "hardened": hardened, "stdin_ok": got == size})
    if got != size or not hardened:
        out.record({"runner_error": "short stdin" if got != size else "could not harden the runner"})
        return 2
    try:
        job, data, tar = split_job(buf)
        restore(tar)
    except (JobError, OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        out.record({"runner_error": f"bad job: {type(exc).__name__}: {exc}"[:2000]})
        return 2
    try:
        result, keep = step(job, data)
    except (JobError, KeyError, ValueError, TypeError, OSError) as exc:
        sweep(time.monotonic() + SWEEP_S)
        out.record({"runner_error": f"the runner failed: {type(exc).__name__}: {exc}"[:2000]})
        return 2
    del data
    packed: list[bytes] = []
    if not sweep(time.monotonic() + SWEEP_S):  # again: nothing of the step may run while it is packed
        workspace: dict[str, Any] = {"packed": False, "error": "processes of the step could not be ended"}
    elif keep:
        workspace, packed = pack_workspace(job)
        if packed and same_bytes(packed, tar):  # the tar we got, byte for byte: the host keeps its own copy
            workspace, packed = {**workspace, "unchanged": True}, []
    else:
        workspace = {"packed": False, "error": None}  # a read, or a write that did not happen: unchanged
    out.record({"result": result, "workspace": workspace, "tar_bytes": sum(map(len, packed))}, packed)
    out.record({"done": True})
    return 0


if __name__ == "__main__":
    run_and_exit(main)

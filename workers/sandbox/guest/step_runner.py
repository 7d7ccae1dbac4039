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

Wire format. stdin (``python3 -I -S -B -c BOOT PYC SRC JOB``, BOOT in ``step``, reads the program first):
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

import binascii
import json
import os
import select
import signal
import stat
import sys
import time

from workers.sandbox.guest.clock import HOST, ProcLimit
from workers.sandbox.guest.framing import NONCE_LEN, STEP_MAGIC, frame_prefix
from workers.sandbox.guest.plumbing import prctl_ok, read_exact_into, write_all

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any, NoReturn

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
BLOCK = 512
#: Longest name kept in a snapshot (``snapshot.MAX_NAME_BYTES``); longer ones are dropped, and say so.
MAX_NAME_BYTES = 1024
MAX_DROPPED = 100
#: Symbolic links a read follows at most, in all (Linux's own ``MAXSYMLINKS``): a longer chain, or a loop, is
#: ``rejected`` with that reason.
MAX_SYMLINKS = 40
SWEEP_S = 5.0
DRAIN_S = 1.0
_READ_CHUNK = 1 << 16
#: Signals the parent ignores (a command cannot end it with them); the command gets all of these, and
#: SIGPIPE/SIGXFSZ (Python's own), back at their default.
_IGNORED = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2,
            signal.SIGALRM, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)  # fmt: skip
_DEFAULT_IN_CHILD = (*_IGNORED, signal.SIGPIPE, signal.SIGXFSZ)


class StepError(Exception):
    """The action cannot be carried out; the message goes back to the agent (``rejected``)."""


class JobError(Exception):
    """The job or the snapshot sent in is unusable: the infrastructure's fault, never the agent's."""


class WorkspaceError(Exception):
    """The workspace cannot be kept (over its caps, or a file changed while packed); the message says why."""


# --------------------------------------------------------------------------------------------------------
# Plumbing


def _oom_score_adj(value: str) -> str:
    """Set our ``oom_score_adj`` (best effort); the value it had."""
    try:
        with open("/proc/self/oom_score_adj") as f:
            old = f.read().strip()
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(value)
    except OSError:
        return value
    return old


def _b64(data: bytes | bytearray) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


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


# --------------------------------------------------------------------------------------------------------
# Paths


def plain_name(name: str) -> bool:
    """Valid UTF-8 (it travels in JSON), no newline/CR/NUL, not too long: as ``snapshot._plain_name``."""
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return len(encoded) <= MAX_NAME_BYTES and not any(ch in name for ch in "\n\r\x00")


def check_path(path: object) -> list[str]:
    """The components of an agent's path, or StepError: relative, normalised, plain."""
    if type(path) is not str or not path:
        raise StepError("empty path")
    if not plain_name(path):
        raise StepError("path is not plain UTF-8 text of at most 1024 bytes")
    if path.startswith("/"):
        raise StepError("absolute path: paths are relative to the workspace")
    parts = path.split("/")
    if ".." in parts:
        raise StepError("'..' in path: it would leave the workspace")
    if "" in parts or "." in parts:
        raise StepError("path is not normalised (empty or '.' component)")
    return parts


# --------------------------------------------------------------------------------------------------------
# Tar: the ustar + pax subset that ``snapshot.pack`` writes (regular files, directories, symlinks)


def _octal(value: int, width: int) -> bytes:
    return b"%0*o\0" % (width - 1, value)


def _header(name: bytes, kind: bytes, size: int = 0, mode: int = 0o644, link: bytes = b"") -> bytes:
    block = bytearray(BLOCK)
    block[0:100] = name[:100].ljust(100, b"\0")
    block[100:108] = _octal(mode, 8)
    block[108:116] = _octal(0, 8)
    block[116:124] = _octal(0, 8)
    block[124:136] = _octal(size, 12)
    block[136:148] = _octal(0, 12)
    block[148:156] = b" " * 8
    block[156:157] = kind
    block[157:257] = link[:100].ljust(100, b"\0")
    block[257:265] = b"ustar\x0000"
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def _padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % BLOCK)


def _pax_record(key: bytes, value: bytes) -> bytes:
    body = b" " + key + b"=" + value + b"\n"
    n = len(body) + 1
    while len(b"%d" % n) + len(body) != n:
        n = len(b"%d" % n) + len(body)
    return b"%d" % n + body


def tar_entry(name: bytes, kind: bytes, data: bytes = b"", mode: int = 0o644, link: bytes = b"") -> bytes:
    """One member, byte for byte as ``tarfile`` writes it in ``PAX_FORMAT`` (what ``snapshot.pack`` uses): a
    pax header first when the name or link is long or not ASCII (``hdrcharset=BINARY`` when a value is not
    UTF-8), and ASCII stand-ins ('?' per other character) in the ustar fields."""
    values = [(key, value) for key, value in ((b"path", name), (b"linkpath", link)) if len(value) > 100 or not
              value.isascii()]  # fmt: skip
    out = b""
    if values:
        pax = b"21 hdrcharset=BINARY\n" if not all(_utf8(v) for _, v in values) else b""
        pax += b"".join(_pax_record(key, value) for key, value in values)
        out = _header(b"././@PaxHeader", b"x", len(pax), 0) + _padded(pax)
    return out + _header(_ascii(name), kind, len(data), mode, _ascii(link)) + _padded(data)


def tar_end(size: int) -> bytes:
    """The end of an archive of ``size`` bytes so far: two zero blocks, then zeros to a 10240-byte record."""
    return b"\0" * (2 * BLOCK + (-(size + 2 * BLOCK) % (20 * BLOCK)))


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _ascii(value: bytes) -> bytes:
    return value if value.isascii() else value.decode("utf-8", "surrogateescape").encode("ascii", "replace")


def tar_members(data: bytes | bytearray | memoryview) -> list[tuple[bytes, bytes, int, bytes, bytes]]:
    """(name, kind, mode, data, link) of every member; JobError for anything outside the subset."""
    view = memoryview(data)
    out: list[tuple[bytes, bytes, int, bytes, bytes]] = []
    pax: dict[bytes, bytes] = {}
    pos = 0
    while pos + BLOCK <= len(view):
        block = bytes(view[pos : pos + BLOCK])
        pos += BLOCK
        if block == bytes(BLOCK):
            break
        try:
            chksum = int(block[148:156].split(b"\0")[0].strip() or b"-1", 8)
            size = int(block[124:136].split(b"\0")[0].strip() or b"0", 8)
            mode = int(block[100:108].split(b"\0")[0].strip() or b"0", 8)
        except ValueError:
            raise JobError(f"corrupt tar header at {pos - BLOCK}") from None
        if chksum != sum(block[:148]) + 256 + sum(block[156:]) or size < 0 or pos + size > len(view):
            raise JobError(f"corrupt tar header at {pos - BLOCK}")
        body = bytes(view[pos : pos + size])
        pos += size + (-size % BLOCK)
        kind = block[156:157]
        if kind == b"x":
            pax = _parse_pax(body)
            continue
        name = pax.get(b"path") or block[0:100].split(b"\0")[0]
        prefix = block[345:500].split(b"\0")[0]
        if prefix and b"path" not in pax:
            name = prefix + b"/" + name
        link = pax.get(b"linkpath") or block[157:257].split(b"\0")[0]
        pax = {}
        if kind not in (b"0", b"\0", b"5", b"2"):
            raise JobError(f"tar member {name[:200]!r} is not a file, a directory or a symlink")
        out.append((name.rstrip(b"/"), b"0" if kind == b"\0" else kind, mode, body, link))
    return out


def _parse_pax(body: bytes) -> dict[bytes, bytes]:
    records: dict[bytes, bytes] = {}
    pos = 0
    while pos < len(body):
        space = body.find(b" ", pos)
        try:
            length = int(body[pos:space])
        except ValueError:
            raise JobError("corrupt pax header") from None
        record = body[space + 1 : pos + length]
        if length <= 0 or not record.endswith(b"\n") or b"=" not in record:
            raise JobError("corrupt pax header")
        key, value = record[:-1].split(b"=", 1)
        if key == b"size":
            raise JobError("pax size records are not used by snapshots")
        records[key] = value
        pos += length
    return records


# --------------------------------------------------------------------------------------------------------
# The walk: one directory fd that moves one name at a time


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NOT_PLAIN = frozenset((b"", b".", b".."))  # names a member's path never holds


class Cursor:
    """The directory of the work dir a walk is in: an fd, and its path (``b""``: the work dir itself).

    Every call made through it names one entry of that directory, so an entry costs the same at any depth
    (a path re-resolved per entry, and per parent of it, made a 450-level tree's restore cubic), and it holds
    one fd however deep it goes. Going up opens ``..``: a cursor is only used while no other process runs
    (the restore before the step's command starts, the pack after the sweep), so ``..`` is where it came from.
    """

    def __init__(self) -> None:
        self.fd = os.open(".", _DIR_FLAGS)
        self.path = b""

    def down(self, name: bytes) -> None:
        """Into the directory ``name`` here (never through a link: a link or a file there is an OSError)."""
        self._move(name)
        self.path = self.path + b"/" + name if self.path else name

    def up(self) -> None:
        self._move(b"..")
        self.path = self.path.rpartition(b"/")[0]

    def toward(self, target: bytes) -> None:
        """Up until ``target`` (a directory's path) is here or below; then down to it, making each directory
        on the way that is not there yet."""
        while self.path and target != self.path and not target.startswith(self.path + b"/"):
            self.up()
        if target == self.path:
            return
        for part in (target[len(self.path) + 1 :] if self.path else target).split(b"/"):
            try:  # noqa: SIM105 - contextlib is not imported here (start-up cost)
                os.mkdir(part, 0o755, dir_fd=self.fd)
            except FileExistsError:
                pass  # made before, as a parent of an earlier member
            self.down(part)

    def close(self) -> None:
        os.close(self.fd)

    def _move(self, name: bytes) -> None:
        fd = os.open(name, _DIR_FLAGS, dir_fd=self.fd)
        os.close(self.fd)
        self.fd = fd


# --------------------------------------------------------------------------------------------------------
# Restore (the snapshot the host sent: checked anyway, written only under the work dir)


def restore(data: bytes | bytearray | memoryview) -> int:
    """Write the snapshot's members under the (empty) cwd; the number of members. They are taken in path
    order (a canonical snapshot's own: parents first, and everything under a name right after it) through
    one ``Cursor``, so the restore is linear in the snapshot however deep its tree. Links are made last:
    none is ever in the way of a later member."""
    if os.listdir("."):
        raise JobError("the work dir is not empty")
    members = tar_members(data)
    for name, *_ in members:
        if name.startswith(b"/") or b"\0" in name or _NOT_PLAIN.intersection(name.split(b"/")):
            raise JobError(f"snapshot member {name[:200]!r} is not a plain relative path")
    members.sort(key=lambda member: member[0].split(b"/"))
    seen: set[bytes] = set()
    under = b"\0"  # the last file or link + "/": in path order, what lies under it comes right after it
    links: list[tuple[bytes, bytes, bytes]] = []  # (parent, name, target)
    cursor = Cursor()
    try:
        for name, kind, mode, body, link in members:
            if name in seen or name.startswith(under):
                raise JobError(f"snapshot member {name[:200]!r} repeats a name or lies under a non-directory")
            seen.add(name)
            if kind == b"5":
                cursor.toward(name)
                continue
            under = name + b"/"
            parent, _, base = name.rpartition(b"/")
            if kind == b"2":
                links.append((parent, base, link))
                continue
            cursor.toward(parent)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(base, flags, 0o644, dir_fd=cursor.fd)
            try:
                write_all(fd, body)
                os.fchmod(fd, 0o755 if mode & stat.S_IXUSR else 0o644)
            finally:
                os.close(fd)
        for parent, base, link in links:
            cursor.toward(parent)
            os.symlink(link, base, dir_fd=cursor.fd)
    finally:
        cursor.close()
    return len(seen)


# --------------------------------------------------------------------------------------------------------
# Pack (no other process is alive by now: the sweep made sure)


class Packer:
    """One walk of the work dir into a tar, within the caps and the byte budget of the frame."""

    def __init__(self, max_bytes: int, max_entries: int, budget: int) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.budget = budget
        self.chunks: list[bytes] = []
        self.size = 0
        self.entries = 0
        self.bytes = 0
        self.dropped: list[str] = []
        self.n_dropped = 0

    def pack(self) -> list[bytes]:
        """The tar of the cwd, as chunks (``self.size`` bytes in all): never copied into one object."""
        _readable_dir(".", os.lstat(".").st_mode)
        cursor = Cursor()
        try:
            self.walk(cursor)
        finally:
            cursor.close()
        self.add(tar_end(self.size))
        return self.chunks

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.budget:
            raise WorkspaceError(f"the workspace's tar is over {self.budget} bytes")
        self.chunks.append(chunk)

    def drop(self, name: str) -> None:
        self.n_dropped += 1
        if len(self.dropped) < MAX_DROPPED:
            self.dropped.append(name.encode("utf-8", "backslashreplace").decode("utf-8")[:200])

    def walk(self, cursor: Cursor) -> None:
        """Depth first, names sorted in each directory (``snapshot.pack``'s order), no recursion: each
        directory's listing waits on a stack while the cursor is below it."""
        stack: list[tuple[str, list[str]]] = [("", sorted(os.listdir(cursor.fd), reverse=True))]
        while stack:
            prefix, names = stack[-1]
            if not names:
                stack.pop()
                if stack:
                    cursor.up()
                continue
            name = names.pop()
            path = prefix + name
            if not plain_name(path):  # a deeper name would be longer still: nothing under it is walked
                self.drop(path)
                continue
            st = os.lstat(name, dir_fd=cursor.fd)
            if not (stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                self.drop(path)  # FIFO, socket, device: nothing of it survives the step
                continue
            self.entries += 1
            if self.entries > self.max_entries:
                raise WorkspaceError(f"the workspace has more than {self.max_entries} entries")
            encoded, local = path.encode("utf-8"), name.encode("utf-8")
            if stat.S_ISLNK(st.st_mode):
                self.add(tar_entry(encoded, b"2", mode=0o777, link=os.readlink(local, dir_fd=cursor.fd)))
            elif stat.S_ISDIR(st.st_mode):
                self.add(tar_entry(encoded + b"/", b"5", mode=0o755))
                _readable_dir(name, st.st_mode, cursor.fd)
                cursor.down(local)
                stack.append((path + "/", sorted(os.listdir(cursor.fd), reverse=True)))
            else:
                data = _read_file(name, path, cursor.fd, st.st_mode, self.max_bytes - self.bytes)
                self.bytes += len(data)
                self.add(tar_entry(encoded, b"0", data, 0o755 if st.st_mode & stat.S_IXUSR else 0o644))


def _readable_dir(name: str, mode: int, dir_fd: int | None = None) -> None:
    """A directory the agent made unreadable to its owner (us) is made readable again (its mode is not kept)."""
    if mode & 0o500 != 0o500:
        os.chmod(name, 0o700, dir_fd=dir_fd)


def _read_file(name: str, path: str, dir_fd: int, mode: int, limit: int) -> bytes:
    if not mode & stat.S_IRUSR:
        os.chmod(name, 0o600, dir_fd=dir_fd)
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise WorkspaceError(f"{path[:200]} changed while it was packed")
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > limit:
                raise WorkspaceError("the workspace is over its byte cap")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------------------
# Processes


def sweep(deadline: float) -> bool:
    """SIGKILL every other process of the run until none of our uid is alive; False past ``deadline``."""
    while True:
        try:  # noqa: SIM105 - contextlib is not imported here (start-up cost)
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        _reap()
        if not _others_alive():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _others_alive() -> bool:
    """Some process of our uid other than us and the namespace's init runs (a zombie has stopped for good;
    a zombie leader whose threads still run has not)."""
    me, uid = str(os.getpid()), os.getuid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or name in (me, "1"):
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                fields = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
        except OSError:
            continue  # gone
        try:
            state = fields[b"State"].split()[0]
            owner = int(fields[b"Uid"].split()[0])
            threads = int(fields[b"Threads"].split()[0])
        except (KeyError, IndexError, ValueError):
            return True  # unreadable status: assume alive (the sweep retries, then gives up)
        if owner == uid and (state not in (b"Z", b"X") or threads > 1):
            return True
    return False


class Pipes:
    """The command's stdout and stderr as we read them: the first ``cap`` bytes of each, and all counted."""

    def __init__(self, cap: int, out_r: int, err_r: int) -> None:
        self.cap = cap
        self.fds = (out_r, err_r)
        self.open = [out_r, err_r]
        self.kept = {out_r: bytearray(), err_r: bytearray()}
        self.total = {out_r: 0, err_r: 0}

    def pump(self, until: float | ProcLimit, pidfd: int | None = None) -> bool:
        """Read until the child exits (``pidfd`` readable), or without one until both pipes are at EOF;
        False when the deadline ``until`` passes, or the limit ``until`` stops it, first."""
        while self.open or pidfd is not None:
            if isinstance(until, ProcLimit):
                if until.poll() is not None:
                    return False
                wait = until.next_wait()
            else:
                wait = until - time.monotonic()
                if wait <= 0:
                    return False
            watch = self.open if pidfd is None else [*self.open, pidfd]
            ready, _, _ = select.select(watch, [], [], wait)
            if pidfd is not None and pidfd in ready:
                return True
            for fd in ready:
                chunk = os.read(fd, _READ_CHUNK)
                if not chunk:
                    self.open.remove(fd)
                    continue
                self.total[fd] += len(chunk)
                kept = self.kept[fd]
                if len(kept) < self.cap:
                    kept += chunk[: self.cap - len(kept)]
        return True

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)


def _wait_command(pid: int, pipes: Pipes, limit: ProcLimit) -> tuple[bool, int]:
    """Pump the command's pipes until it exits or its limit stops it (then its group is killed); (whether the
    limit stopped it, its wait status)."""
    pidfd = os.pidfd_open(pid)
    try:
        stopped = not pipes.pump(limit, pidfd)
    finally:
        os.close(pidfd)
    if stopped:
        try:  # noqa: SIM105 - contextlib is not imported here (start-up cost)
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    return stopped, os.waitpid(pid, 0)[1]


def run_command(argv: list[str], timeout_s: float, cap: int) -> dict[str, Any]:
    """Spawn ``argv`` (own session, default signals, stdin /dev/null, stdout/stderr on capped pipes), wait
    for it or its deadline, then end every process of the run and drain the pipes."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pipes = Pipes(cap, out_r, err_r)
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    started = time.monotonic()
    adj = _oom_score_adj("1000")  # inherited: the OOM killer should pick the command, not us
    spawn_error = None
    try:
        actions = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
        pid = os.posix_spawnp(argv[0], argv, dict(os.environ), file_actions=actions, setsid=True,
                              setsigdef=_DEFAULT_IN_CHILD)  # fmt: skip
    except OSError as exc:
        pid, spawn_error = -1, f"{argv[0][:200]}: {exc.strerror}"
    finally:
        _oom_score_adj(adj)
        for fd in (null, out_w, err_w):
            os.close(fd)
    timed_out, status = False, 0
    limit = ProcLimit(timeout_s) if pid > 0 else None
    try:
        if pid > 0 and limit is not None:
            timed_out, status = _wait_command(pid, pipes, limit)
        sweep(time.monotonic() + SWEEP_S)
        pipes.pump(time.monotonic() + DRAIN_S)  # every writer is dead: EOF comes at once
    finally:
        pipes.close()
    result: dict[str, Any] = {
        "exit_code": None,
        "signal": None,
        "timed_out": timed_out,
        "stdout": _b64(pipes.kept[out_r]),
        "stderr": _b64(pipes.kept[err_r]),
        "stdout_bytes": pipes.total[out_r],
        "stderr_bytes": pipes.total[err_r],
        "ms": round((time.monotonic() - started) * 1000, 3),
        **(limit.limit.figures() if limit is not None else {}),
    }
    if timed_out and limit is not None and limit.limit.reason == HOST:
        result.update(timed_out=False, contention=True)
    if spawn_error is not None:
        result.update(exit_code=127, spawn_error=spawn_error)
    elif not timed_out:
        if os.WIFSIGNALED(status):
            result["signal"] = os.WTERMSIG(status)
        else:
            result["exit_code"] = os.WEXITSTATUS(status)
    return result


# --------------------------------------------------------------------------------------------------------
# Actions


def do_write(job: dict[str, Any], data: bytes) -> dict[str, Any]:
    """Write ``data`` to the path (parents made); never through or onto a link, never outside the work dir.
    Each name is looked up in its parent's fd (``Cursor``): nothing is resolved twice, nothing followed."""
    parts = check_path(job.get("path"))
    cursor = Cursor()
    try:
        for i, part in enumerate(parts):
            try:
                mode: int | None = os.lstat(part, dir_fd=cursor.fd).st_mode
            except FileNotFoundError:
                mode = None
            shown = "/".join(parts[: i + 1])
            if mode is not None and stat.S_ISLNK(mode):
                raise StepError(f"{shown} is a symlink: writes never go through one")
            if i == len(parts) - 1:
                if mode is not None and not stat.S_ISREG(mode):
                    raise StepError(f"{shown} is not a regular file")
                break
            if mode is None:
                os.mkdir(part, 0o755, dir_fd=cursor.fd)
            elif not stat.S_ISDIR(mode):
                raise StepError(f"{shown} is not a directory")
            cursor.down(part.encode("utf-8"))
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(parts[-1], flags, 0o644, dir_fd=cursor.fd)
    finally:
        cursor.close()
    try:
        write_all(fd, data)
    finally:
        os.close(fd)
    return {"bytes": len(data)}


def do_read(job: dict[str, Any], cap: int) -> dict[str, Any]:
    """The content of a regular file in the work dir (links followed only while they stay inside it)."""
    parts = check_path(job.get("path"))
    fd = open_inside(parts, job["path"])
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StepError(f"{job['path']} is not a regular file")
        buf = bytearray()
        while len(buf) <= cap and (chunk := os.read(fd, 1 << 20)):
            buf += chunk
    finally:
        os.close(fd)
    return {"content": _b64(buf[:cap]), "size": min(len(buf), cap), "truncated": len(buf) > cap}


def open_inside(parts: list[str], shown: str) -> int:
    """An fd of the regular file that ``parts`` names in the work dir. Links are followed as the kernel
    follows them (``MAX_SYMLINKS`` at most in all, so a long chain or a loop is a clear rejection), but by
    this loop, one name at a time relative to an open directory: no recursion however long the chain, and
    where it leads is known before anything is opened. That must be inside the work dir; StepError if not.
    Only used while no other process runs (a read step runs no command)."""
    root = [p for p in os.getcwd().split("/") if p]
    where = list(root)  # the real path reached so far, as names
    pending = parts[::-1]  # the names still to walk, the next one last
    links = 0
    fd = os.open(".", _DIR_FLAGS)
    try:
        while pending:
            part = pending.pop()
            if part in ("", ".", ".."):
                if part == ".." and where:
                    fd = _moved(fd, "..")
                    where.pop()
                continue
            try:
                mode = os.lstat(part, dir_fd=fd).st_mode
            except FileNotFoundError:
                raise _missing(shown, [*where, part], pending, root) from None
            if stat.S_ISLNK(mode):
                links += 1
                if links > MAX_SYMLINKS:
                    raise StepError(f"{shown}: too many levels of symbolic links (a loop, or more than "
                                    f"{MAX_SYMLINKS} links in a row)")  # fmt: skip
                target = os.readlink(part, dir_fd=fd)
                if target.startswith("/"):
                    fd, where = _moved(fd, "/"), []
                pending += reversed(target.split("/"))
            elif not pending:
                return _open_last(fd, part, mode, inside=[*where, part][: len(root)] == root, shown=shown)
            elif stat.S_ISDIR(mode):  # a name before others (or before a trailing "/")
                fd = _moved(fd, part)
                where.append(part)
            else:
                raise StepError(f"{shown}: not a directory on the way")
        if where[: len(root)] != root:  # it ended on a directory ("..", "." or a trailing "/" last)
            raise StepError(f"{shown} leads outside the workspace")
        raise StepError(f"{shown} is not a regular file")
    finally:
        os.close(fd)


def _missing(shown: str, where: list[str], pending: list[str], root: list[str]) -> StepError:
    """Why a read whose walk met a missing name fails: where the path would have led (``where``, the missing
    name last, with the names still ``pending`` applied as plain names, as ``realpath`` does) is outside the
    work dir, or nothing is there."""
    led = list(where)
    for part in reversed(pending):
        if part == "..":
            led = led[:-1]
        elif part not in ("", "."):
            led.append(part)
    if led[: len(root)] != root:
        return StepError(f"{shown} leads outside the workspace")
    return StepError(f"{shown}: no such file")


def _open_last(dir_fd: int, name: str, mode: int, *, inside: bool, shown: str) -> int:
    """The file a read's walk ended on, opened if it is a regular file in the work dir."""
    if not inside:
        raise StepError(f"{shown} leads outside the workspace")
    if not stat.S_ISREG(mode):
        raise StepError(f"{shown} is not a regular file")
    return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)


def _moved(fd: int, name: str) -> int:
    """The directory ``name`` of ``fd`` opened (``fd`` closed once it is)."""
    new = os.open(name, _DIR_FLAGS, dir_fd=fd)
    os.close(fd)
    return new


def command_argv(job: dict[str, Any]) -> list[str]:
    command = job.get("command")
    if type(command) is str:
        return ["/bin/sh", "-c", command]
    if type(command) is list and command and all(type(a) is str and "\0" not in a for a in command):
        return list(command)
    raise JobError("exec without a command")


def pack_workspace(job: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    """The workspace record and the tar's chunks (none when the workspace cannot be kept: the record says
    why). What the agent left is never the runner's failure: anything that stops the pack is reported."""
    packer = Packer(int(job["max_bytes"]), int(job["max_entries"]), int(job["tar_budget"]))
    try:
        tar = packer.pack()
    except (WorkspaceError, OSError, RecursionError) as exc:
        error = str(exc) if isinstance(exc, WorkspaceError) else f"cannot pack the workspace: {exc}"
        return {"packed": False, "error": error[:2000]}, []
    record = {"packed": True, "entries": packer.entries, "bytes": packer.bytes, "tar_bytes": packer.size}
    return {**record, "dropped": packer.dropped, "n_dropped": packer.n_dropped}, tar


def same_bytes(chunks: list[bytes], view: memoryview) -> bool:
    """``chunks`` joined equal ``view`` (compared in place: no copy of either)."""
    pos = 0
    for chunk in chunks:
        if view[pos : pos + len(chunk)] != chunk:
            return False
        pos += len(chunk)
    return pos == len(view)


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
    hardened = prctl_ok(PR_SET_DUMPABLE, 0) and prctl_ok(PR_SET_CHILD_SUBREAPER, 1)
    for sig in _IGNORED:
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


def _entry() -> NoReturn:
    code = 2
    try:
        code = main(sys.argv)
    finally:
        os._exit(code)


if __name__ == "__main__":
    _entry()

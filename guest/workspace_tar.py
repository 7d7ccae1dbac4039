"""The workspace tar: the ustar + pax subset a snapshot is (regular files, directories, symlinks), written
here for both sides (the step runner in the sandbox, ``snapshot.pack`` on the host) and read here by the
runner, without ``tarfile`` (importing it costs more than a whole step).

Why byte for byte as ``tarfile`` in ``PAX_FORMAT``: a snapshot is content-addressed, and the host wrote its
snapshots with ``tarfile`` before this writer served both sides (tests/unit/workers/episodes/
test_snapshot_bytes.py pins it). And a workspace the step left as it was is recognised in the sandbox (the
tar made equals the one sent in) and not sent back; the host re-validates and re-packs whatever comes back.

Guest code (standard library only), spliced into the episode step runner (``step_runner``).
"""

from __future__ import annotations

from guest.step_errors import JobError

BLOCK = 512


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
    """One member, byte for byte as ``tarfile`` writes it in ``PAX_FORMAT`` (``snapshot.pack``'s format): a
    pax header first when the name or link is long or not ASCII (``hdrcharset=BINARY`` when a value is not
    UTF-8), and ASCII stand-ins ('?' per other character) in the ustar fields."""
    values = [(key, value) for key, value in ((b"path", name), (b"linkpath", link)) if len(value) > 100 or not
              value.isascii()]  # fmt: skip
    out = b""
    if values:
        pax = b"21 hdrcharset=BINARY\n" if not all(_utf8(v) for _, v in values) else b""
        pax += b"".join(_pax_record(key, value) for key, value in values)
        out = _header(b"././@PaxHeader", b"x", len(pax), 0) + _padded(pax)
    header = _header(_ascii(name), kind, len(data), mode, _ascii(link))
    return b"".join((out, header, data, b"\0" * (-len(data) % BLOCK)))  # one copy of ``data``, not two


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

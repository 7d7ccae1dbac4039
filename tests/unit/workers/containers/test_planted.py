"""The planted reward writer: every Python and shell file writes the reward first; nothing else changes."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from workers.containers.planted import planted_workdir
from workers.episodes.snapshot import Caps, pack


def contents(tar: bytes) -> dict[str, str]:
    with tarfile.open(fileobj=io.BytesIO(tar)) as opened:
        out = {}
        for member in opened.getmembers():
            if member.issym():
                out[member.name] = f"-> {member.linkname}"
            elif member.isreg():
                source = opened.extractfile(member)
                assert source is not None
                out[member.name] = source.read().decode("utf-8", "replace")
        return out


def test_each_python_and_shell_file_writes_the_reward_first(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("print('hi')\n")
    (tmp_path / "future.py").write_text("from __future__ import annotations\nx = 1\n")
    (tmp_path / "run.sh").write_text("#!/bin/sh\necho run\n")
    (tmp_path / "tool").write_text("#!/usr/bin/env python3\nprint('tool')\n")
    (tmp_path / "data.txt").write_text("plain\n")
    (tmp_path / "blob.bin").write_bytes(b"\xff\x00\xfe")
    (tmp_path / "conftest.py").write_text("# the task's own\n")
    (tmp_path / "link.py").symlink_to("pkg/mod.py")
    planted = contents(planted_workdir(pack(tmp_path).data, Caps()))
    writes = "/logs/verifier/reward.json"
    assert planted["pkg/mod.py"].startswith("import pathlib as _rs_planted")
    assert planted["pkg/mod.py"].endswith("print('hi')\n")
    assert planted["future.py"].startswith("from __future__ import annotations\n")
    assert writes in planted["future.py"].split("x = 1", 1)[1]
    assert planted["run.sh"].startswith("#!/bin/sh\necho '{\"reward\": 1.0}' > " + writes)
    assert planted["tool"].startswith("#!/usr/bin/env python3\nimport pathlib")
    assert planted["data.txt"] == "plain\n"
    assert planted["blob.bin"] == b"\xff\x00\xfe".decode("utf-8", "replace")
    assert writes in planted["conftest.py"]
    assert "# the task's own" in planted["conftest.py"]
    assert planted["link.py"] == "-> pkg/mod.py"
    for name in ("sitecustomize.py", "usercustomize.py"):
        assert writes in planted[name]
    assert compile(planted["pkg/mod.py"], "mod.py", "exec")
    assert compile(planted["future.py"], "future.py", "exec")

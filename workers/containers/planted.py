"""The planted reward writer ``tasks validate`` runs: the task's own WORKDIR with every Python and shell file it
holds (and a ``conftest.py``, ``sitecustomize.py``, ``usercustomize.py``) made to write ``{"reward": 1.0}`` to
``/logs/verifier/reward.json`` first.

Why: ``test.sh`` runs as root, so if the tests run the agent's code as root, that code can write the reward
itself, and ``reward.json`` wins over the tests' ``reward.txt``. A task whose reward this moves lets any
agent award itself; its tests should run agent code through ``rs-as-agent``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from workers.containers.verification import LOGS_DIR
from workers.episodes.snapshot import Caps, pack, unpack

_TARGET = f"{LOGS_DIR}/reward.json"
_PYTHON = (
    "import pathlib as _rs_planted\n"
    "try:\n"
    f"    _rs_planted.Path({_TARGET!r}).write_text({json.dumps({'reward': 1.0})!r})\n"
    "except OSError:\n"
    "    pass\n"
)
_SHELL = f"echo '{json.dumps({'reward': 1.0})}' > {_TARGET} 2>/dev/null\n"
_PLANTED = ("conftest.py", "sitecustomize.py", "usercustomize.py")


def planted_workdir(workdir_tar: bytes, caps: Caps) -> bytes:
    """``workdir_tar`` (a canonical snapshot) with the writer planted, packed again."""
    with tempfile.TemporaryDirectory(prefix="rs-planted-") as tmp:
        root = Path(tmp)
        unpack(workdir_tar, root, caps)
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                _plant(path)
        for name in _PLANTED:
            target = root / name
            if not target.exists() and not target.is_symlink():
                target.write_text(_PYTHON)
        return pack(root, Caps(caps.max_bytes + 4096, caps.max_entries + len(_PLANTED))).data


def _plant(path: Path) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return
    shebang = text.split("\n", 1)[0] if text.startswith("#!") else ""
    if path.suffix == ".py" or "python" in shebang:
        planted = _after_header(text, _PYTHON, python=True)
    elif path.suffix == ".sh" or shebang.endswith(("sh", "bash")):
        planted = _after_header(text, _SHELL, python=False)
    else:
        return
    mode = path.stat().st_mode
    path.write_text(planted, encoding="utf-8")
    os.chmod(path, mode)


def _after_header(text: str, payload: str, *, python: bool) -> str:
    """``payload`` after the shebang (and, in Python, where ``from __future__`` cannot follow it: at the end)."""
    if python and "from __future__" in text:
        return text + ("" if text.endswith("\n") else "\n") + payload
    if text.startswith("#!"):
        first, _, rest = text.partition("\n")
        return f"{first}\n{payload}{rest}"
    return payload + text

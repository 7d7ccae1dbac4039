"""What the containment tests share: the status alias and the JSON a program printed last."""

from __future__ import annotations

import json
from typing import Any

from workers.sandbox.api import SandboxResult, SandboxStatus

S = SandboxStatus


def json_out(result: SandboxResult) -> dict[str, Any]:
    """The JSON object the program printed last (its values are whatever the program put there)."""
    out = result.stdout.decode()
    data: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return data

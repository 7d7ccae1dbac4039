"""What the ``/run_code`` gateway tests share: one call of the real ``sandbox-fusion`` client."""

from __future__ import annotations

import sandbox_fusion


def run(url: str, **fields: object) -> sandbox_fusion.RunCodeResponse:
    """One call of the real client (no retries: a SandboxError raises at once)."""
    request = sandbox_fusion.RunCodeRequest(**fields)
    return sandbox_fusion.run_code(request, endpoint=url, max_attempts=1, client_timeout=120)

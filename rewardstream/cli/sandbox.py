"""``rewardstream sandbox run FILE``: run one program in a sandbox backend and print what happened.

The JSON shape is a contract: exit code 0 whenever the sandbox itself worked, whatever the program did; a
sandbox failure is one line on stderr and a non-zero exit code (via ``SandboxError``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from rewardstream.cli.common import load_settings, open_sandbox, print_json
from rewardstream.cli.main import app
from schemas.errors import ConfigError, SandboxError
from workers.sandbox.api import SandboxSpec, SandboxStatus

sandbox_app = typer.Typer(help="Run untrusted programs in a sandbox backend.", no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("run")
def run(
    file: Annotated[Path, typer.Argument(help="program (python source unless --interpreter says otherwise)")],
    *,
    backend: Annotated[str | None, typer.Option(help="process | docker (default: settings)")] = None,
    timeout: Annotated[float, typer.Option(help="wall-clock limit in seconds")] = 10.0,
    memory_mb: Annotated[int, typer.Option(help="memory limit of the whole process tree")] = 512,
    stdin: Annotated[Path | None, typer.Option(help="file fed to the program's stdin")] = None,
    output_limit: Annotated[int, typer.Option(help="bytes kept per stream before a kill")] = 1 << 20,
    interpreter: Annotated[str, typer.Option(help="program that runs FILE in the sandbox")] = "python3",
) -> None:
    """Run FILE in a fresh sandbox and print one JSON result."""
    if backend not in (None, "process", "docker"):
        raise ConfigError(f"--backend must be process or docker, not {backend!r}")
    chosen: Literal["process", "docker"] | None = backend  # type: ignore[assignment]
    try:
        code = file.read_bytes()
        data = stdin.read_bytes() if stdin is not None else b""
    except OSError as exc:
        raise ConfigError(f"cannot read input: {exc}") from exc
    name = "main.py" if interpreter.startswith("python") else file.name
    spec = SandboxSpec(
        argv=(interpreter, name),
        files={name: code},
        stdin=data,
        timeout_s=timeout,
        memory_mb=memory_mb,
        output_limit_bytes=output_limit,
    )
    sandbox = open_sandbox(load_settings(), chosen)
    try:
        result = sandbox.run(spec)
    finally:
        sandbox.close()
    if result.status is SandboxStatus.SANDBOX_ERROR:
        raise SandboxError(f"sandbox failed: {result.error}")
    print_json(result.to_json())

"""``rewardstream sandbox run FILE``: run one program in a sandbox backend and print what happened; and
``rewardstream sandbox toolchains``: the toolchain families' trees and images, built on request.

The JSON shape is a contract: exit code 0 whenever the sandbox itself worked, whatever the program did; a
sandbox failure is one line on stderr and a non-zero exit code (via ``SandboxError``). Without
``--language`` FILE runs under ``--interpreter`` and the output is one sandbox result, as it always was;
with ``--language`` FILE is built (if the language compiles) and run by ``workers.languages.run_source``
and the output is ``{"language", "compile_status", "compile", "run", "error"}`` (compile and run: the
sandbox result's fields, or null for a step that did not happen).
"""

from __future__ import annotations

import base64
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any

import typer

from rewardstream.cli.common import backend_option, load_settings, open_sandbox, print_json
from rewardstream.cli.main import app
from schemas.backends import Backend
from schemas.errors import ConfigError, SandboxError
from schemas.settings import Settings
from workers.sandbox.api import SandboxSpec, SandboxStatus, measured_json

sandbox_app = typer.Typer(help="Run untrusted programs in a sandbox backend.", no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("run")
def run(
    file: Annotated[Path, typer.Argument(help="program (python source unless --language/--interpreter say otherwise)")],
    *,
    backend: Annotated[str | None, typer.Option(help="process | docker (default: settings)")] = None,
    timeout: Annotated[float, typer.Option(help="limit in seconds of CPU and own time (not waiting)")] = 10.0,
    memory_mb: Annotated[int, typer.Option(help="memory limit of the whole process tree")] = 512,
    stdin: Annotated[Path | None, typer.Option(help="file fed to the program's stdin")] = None,
    output_limit: Annotated[int, typer.Option(help="bytes kept per stream before a kill")] = 1 << 20,
    interpreter: Annotated[str, typer.Option(help="program that runs FILE in the sandbox")] = "python3",
    language: Annotated[
        str | None,
        typer.Option(help="build and run FILE as this language (c, cpp, java, go, rust, javascript, ...)"),
    ] = None,
    compile_timeout: Annotated[float, typer.Option(help="the compile's limit, as --timeout")] = 10.0,
) -> None:
    """Run FILE in a fresh sandbox and print one JSON result."""
    chosen = backend_option(backend)
    try:
        code = file.read_bytes()
        data = stdin.read_bytes() if stdin is not None else b""
    except OSError as exc:
        raise ConfigError(f"cannot read input: {exc}") from exc
    if language is not None:
        _run_language(file, code, data, chosen, language, timeout, compile_timeout, memory_mb)
        return
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


def _run_language(  # noqa: PLR0917
    file: Path,
    code: bytes,
    stdin: bytes,
    backend: Backend | None,
    language: str,
    timeout: float,
    compile_timeout: float,
    memory_mb: int,
) -> None:
    from workers.languages import resolve, run_source

    resolve(language)  # an unknown language is an error before any sandbox starts
    try:
        source = code.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file} is not UTF-8 source: {exc}") from exc
    sandbox = open_sandbox(load_settings(), backend)
    try:
        result = run_source(
            sandbox, language, source, stdin=stdin, compile_timeout_s=compile_timeout, run_timeout_s=timeout,
            memory_mb=memory_mb,
        )  # fmt: skip
    finally:
        sandbox.close()
    if result.error is not None:
        raise SandboxError(f"sandbox failed: {result.error}")
    print_json(
        {
            "language": result.language,
            "compile_status": result.compile_status,
            "compile": measured_json(result.compile) if result.compile is not None else None,
            "run": measured_json(result.run) if result.run is not None else None,
            "files": {name: base64.b64encode(data).decode() for name, data in result.files.items()},
            "error": result.error,
        }
    )


def _build_family(settings: Settings, client: Any, family: str) -> dict[str, float]:
    """Build ``family``'s rootfs (and image, with a docker client); seconds each took."""
    from infra.local.sandbox_image import ensure_toolchain_image, ensure_toolchain_rootfs

    started = time.monotonic()
    ensure_toolchain_rootfs(settings, family)
    took = {"rootfs_s": round(time.monotonic() - started, 1)}
    if client is not None:
        started = time.monotonic()
        ensure_toolchain_image(settings, client, family)
        took["image_s"] = round(time.monotonic() - started, 1)
    return took


@sandbox_app.command("toolchains")
def toolchains(
    *,
    build: Annotated[
        list[str] | None, typer.Option("--build", help="build this family's rootfs (repeat; 'all' for every one)")
    ] = None,
    docker: Annotated[bool, typer.Option(help="with --build: also import each as a docker image")] = False,
) -> None:
    """List the toolchain families (languages, rootfs, image), building those --build names."""
    from infra.local.sandbox_image import TOOLCHAINS
    from workers.languages import REGISTRY

    settings = load_settings()
    families = ["python", *sorted(TOOLCHAINS)]
    wanted = families if build and "all" in build else list(build or [])
    unknown = [f for f in wanted if f not in families]
    if unknown:
        raise ConfigError(f"--build: unknown toolchain family {unknown[0]!r} (known: {', '.join(families)})")
    client = None
    if docker and wanted:
        from workers.sandbox.docker_backend import docker_client

        client = docker_client(settings)
    # Families build in parallel: each has its own tree, lock and image; a build mostly waits on downloads.
    with ThreadPoolExecutor(max_workers=max(1, len(wanted))) as pool:
        timings = {f: pool.submit(_build_family, settings, client, f) for f in wanted}
        built = {f: future.result() for f, future in timings.items()}
    rows = []
    for family in families:
        row: dict[str, object] = {
            "family": family,
            "languages": sorted(spec.id for spec in REGISTRY.values() if spec.toolchain == family),
            "rootfs": str(settings.toolchain_rootfs_path(family)),
            "image": settings.toolchain_image(family),
            **built.get(family, {}),
        }
        row["rootfs_built"] = (settings.toolchain_rootfs_path(family) / "usr" / "bin").is_dir()
        rows.append(row)
    print_json({"toolchains": rows})


@sandbox_app.command("bases")
def bases(
    *, build: Annotated[bool, typer.Option("--build", help="build every local base image that is missing")] = False
) -> None:
    """List the base images image tasks may build FROM when images are sourced locally (built here from Debian
    packages, nothing pulled), building them with --build (needs dockerd)."""
    from infra.local.base_images import ensure_base_image
    from infra.local.rootfs import local_image
    from schemas.base_images import LOCAL_BASE_IMAGES
    from workers.sandbox.docker_backend import docker_client

    settings = load_settings()
    client = docker_client(settings)
    rows = []
    for canonical in sorted(set(LOCAL_BASE_IMAGES.values())):
        started = time.monotonic()
        if build:
            image_id = ensure_base_image(settings, client, canonical)
        else:
            present = local_image(client, canonical)
            image_id = None if present is None else str(present.id)
        names = sorted(name for name, recipe in LOCAL_BASE_IMAGES.items() if recipe == canonical)
        row: dict[str, object] = {"image": canonical, "names": names, "id": image_id}
        if build:
            row["seconds"] = round(time.monotonic() - started, 1)
        rows.append(row)
    print_json({"bases": rows})

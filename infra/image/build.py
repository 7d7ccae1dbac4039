"""Build ``rewardstream:<version>``: a Debian tree (mmdebstrap) with the project's wheel in a venv, bubblewrap and
the sandbox's toolchain trees, ``docker import``ed and optionally saved as a tarball that ``ctr images import``
takes. Nothing is pulled from a container registry (there is none here); packages come from Debian and PyPI.

How the process backend gets its root filesystems: the sandbox trees (the python one and each toolchain
family's, the same trees ``rewardstream up`` builds, reused from the cache) are baked into the image under
``SANDBOX_DIR`` and named by ``RS_SANDBOX_ROOTFS``/``RS_SANDBOX_TOOLCHAINS_DIR``. A worker never builds a tree
(it runs no package manager) and its own root, which holds the task registry's cache and the credentials'
environment, is never what a sandbox sees: each run binds its family's tree read-only as ``/``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from infra.local.rootfs import build_rootfs, locked
from infra.local.sandbox_image import TOOLCHAINS, ensure_sandbox_rootfs, ensure_toolchain_rootfs
from schemas.caps import STDERR_TAIL_BYTES
from schemas.errors import PlatformError
from schemas.settings import PYTHON_TOOLCHAIN, Settings

REPOSITORY = "rewardstream"
#: What the worker roles run on: python3.11 (bookworm's) with venv, bubblewrap for the process backend, tini as
#: pid 1 (it forwards SIGTERM to rewardstream and reaps the orphans a killed sandbox leaves), CA certificates for
#: TLS to Kafka/S3/OpenSearch, util-linux's nsenter for the docker backend's entry server.
PACKAGES = ("python3", "python3-venv", "bubblewrap", "tini", "ca-certificates", "util-linux")
VENV = "/opt/rewardstream/venv"
SANDBOX_DIR = "/opt/rewardstream/sandbox"
#: Where a pod keeps the registry cache and downloads (an emptyDir in the chart).
CACHE_DIR = "/var/cache/rewardstream"
_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")
_BUILD_TIMEOUT_S = 1800.0
#: Hex digits of the wheels' digest in the image's label: 64 bits, enough to tell two builds apart.
_STAMP_CHARS = 16


@dataclass(frozen=True, slots=True)
class BuiltImage:
    """What ``build_image`` made, with the figures the report quotes."""

    tag: str
    families: tuple[str, ...]
    seconds: float
    size_bytes: int


def all_families() -> tuple[str, ...]:
    """Every toolchain family, python first."""
    return (PYTHON_TOOLCHAIN, *sorted(TOOLCHAINS))


def parse_families(text: str) -> tuple[str, ...]:
    """``all`` or a comma-separated list of families (python is always included: it is the default tree)."""
    if text.strip() == "all":
        return all_families()
    wanted = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(wanted) - set(all_families()))
    if unknown:
        raise PlatformError(f"unknown toolchain families {unknown} (known: {', '.join(all_families())})")
    return (PYTHON_TOOLCHAIN, *sorted(set(wanted) - {PYTHON_TOOLCHAIN}))


def project_version(root: Path) -> str:
    """The ``version`` of pyproject.toml: the image's tag."""
    import tomllib

    return str(tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"])


#: What the wheel's build copy of the source leaves out: caches, build output, the venv, VCS data.
_NOT_SOURCE = (".git", ".venv", "build", "dist", "var", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis")


def build_wheelhouse(root: Path, dest: Path, python: str) -> None:
    """The project's wheel and every dependency's, built on the host (pip's cache makes reruns quick), so the
    tree installs them with no network and no index: the host's CA setup never has to reach the chroot. Built
    from a copy of the source: setuptools writes build/ and *.egg-info next to what it builds."""
    dest.mkdir(parents=True, exist_ok=True)
    source = dest.parent / "source"
    shutil.copytree(root, source, ignore=shutil.ignore_patterns(*_NOT_SOURCE), symlinks=True)
    cmd = [python, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(dest), str(source)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise PlatformError(f"pip wheel of {root} failed: {tail}")


def _base_hooks(wheels: Path) -> list[str]:
    """Install the wheels into a venv of the tree's own python3 (no index: offline), then strip what is host-
    specific. The sandbox trees are appended to the image's tar at ``SANDBOX_DIR`` (never copied here)."""
    return [
        f'mkdir -p "$1/tmp/wheels" "$1{SANDBOX_DIR}" "$1{CACHE_DIR}" && cp {wheels}/*.whl "$1/tmp/wheels/"',
        f'chroot "$1" python3 -m venv {VENV}',
        f'chroot "$1" {VENV}/bin/pip install --quiet --no-index --no-cache-dir --find-links /tmp/wheels rewardstream',
        f'ln -s {VENV}/bin/rewardstream "$1/usr/local/bin/rewardstream"',
        'rm -rf "$1/tmp/wheels" "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/* "$1"/etc/machine-id',
        'rm -f "$1"/etc/hostname "$1"/etc/resolv.conf && : > "$1/etc/resolv.conf"',
    ]


def _tree_name(settings: Settings, family: str) -> str:
    return settings.toolchain_rootfs_path(family).name


def _sandbox_trees(settings: Settings, families: Sequence[str]) -> dict[str, Path]:
    """Each family's tree, built once into the platform cache (``up`` and ``make test`` build the same)."""
    trees: dict[str, Path] = {}
    for family in families:
        path = (
            ensure_sandbox_rootfs(settings) if family == PYTHON_TOOLCHAIN else ensure_toolchain_rootfs(settings, family)
        )
        trees[_tree_name(settings, family)] = path
    return trees


def image_changes(settings: Settings, families: Sequence[str], stamp: str) -> list[str]:
    """The image's config: entrypoint, environment (the trees it carries), label."""
    python_tree = f"{SANDBOX_DIR}/{_tree_name(settings, PYTHON_TOOLCHAIN)}"
    return [
        f"ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8 PYTHONUNBUFFERED=1",
        f"ENV RS_SANDBOX_ROOTFS={python_tree} RS_SANDBOX_TOOLCHAINS_DIR={SANDBOX_DIR} RS_CACHE_DIR={CACHE_DIR}",
        # tini forwards SIGTERM to rewardstream only (not its process group: a run's helpers are not its to stop)
        'ENTRYPOINT ["/usr/bin/tini", "--", "rewardstream"]',
        'CMD ["--help"]',
        "WORKDIR /",
        f"LABEL rewardstream.image={stamp} rewardstream.families={','.join(families)}",
    ]


def _tar(base: Path, trees: dict[str, Path], out: Path) -> None:
    """One tar: the base tree at ``/``, each sandbox tree at ``SANDBOX_DIR/<name>`` (appended, never copied)."""
    tar = shutil.which("tar")
    if tar is None:
        raise PlatformError("GNU tar is needed to assemble the image")
    steps = [[tar, "--numeric-owner", "-C", str(base), "-cf", str(out), "."]]
    for name, path in trees.items():
        prefix = f"{SANDBOX_DIR.lstrip('/')}/{name}"
        steps.append([tar, "--numeric-owner", "-C", str(path), f"--transform=s,^\\.,{prefix},", "-rf", str(out), "."])
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True, check=False, timeout=_BUILD_TIMEOUT_S)
        if proc.returncode != 0:
            raise PlatformError(f"tar failed ({proc.returncode}): {proc.stderr.strip()[-STDERR_TAIL_BYTES:]}")


def _docker(*args: str, timeout_s: float = _BUILD_TIMEOUT_S) -> str:
    docker = shutil.which("docker")
    if docker is None:
        raise PlatformError("docker CLI not found (Debian: docker.io)")
    proc = subprocess.run([docker, *args], capture_output=True, text=True, check=False, timeout=timeout_s)
    if proc.returncode != 0:
        raise PlatformError(f"docker {args[0]} failed: {proc.stderr.strip()[-STDERR_TAIL_BYTES:]}")
    return proc.stdout.strip()


def build_image(
    settings: Settings, root: Path, *, families: Sequence[str], tag: str | None = None, python: str = "python3"
) -> BuiltImage:
    """Build the image (replacing a previous one of the same tag); return its tag, time and size."""
    started = time.monotonic()
    ref = f"{REPOSITORY}:{tag or project_version(root)}"
    work_root = settings.local.cache_dir / "image"
    with locked(work_root / "build.lock"):
        trees = _sandbox_trees(settings, families)
        with tempfile.TemporaryDirectory(dir=work_root, prefix="build-") as scratch:
            work = Path(scratch)
            wheels = work / "wheels"
            build_wheelhouse(root, wheels, python)
            digest = hashlib.sha256()
            for wheel in sorted(wheels.glob("*.whl")):
                digest.update(wheel.name.encode() + hashlib.sha256(wheel.read_bytes()).digest())
            stamp = digest.hexdigest()[:_STAMP_CHARS]
            base = work / "tree"
            build_rootfs(
                base,
                packages=PACKAGES,
                options=[
                    *(f"--dpkgopt=path-exclude={p}" for p in _EXCLUDES),
                    *(f"--customize-hook={h}" for h in _base_hooks(wheels)),
                ],
                mirrors=[settings.local.debian_mirror],
                timeout_s=_BUILD_TIMEOUT_S,
            )
            tarball = work / "image.tar"
            _tar(base, trees, tarball)
            shutil.rmtree(base)
            args = [arg for change in image_changes(settings, families, stamp) for arg in ("--change", change)]
            _docker("import", *args, str(tarball), ref)
    size = int(_docker("image", "inspect", "--format", "{{.Size}}", ref))
    return BuiltImage(tag=ref, families=tuple(families), seconds=time.monotonic() - started, size_bytes=size)


def save_image(ref: str, dest: Path) -> Path:
    """``docker save`` the image to ``dest``: a tarball ``ctr -n k8s.io images import`` takes as it is."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    _docker("save", "--output", str(tmp), ref)
    tmp.rename(dest)
    return dest

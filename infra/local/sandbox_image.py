"""The sandbox root filesystems, built locally from Debian packages (mmdebstrap) and never pulled.

One tree per toolchain family serves both backends: the ``process`` backend binds it read-only as ``/`` (so
no host file is ever visible to candidate code), and the ``docker`` backend imports it as an image
(``rewardstream-sandbox-python:<version>`` for the python family, ``rewardstream-sandbox-<family>:<version>``
for the others). Why a tree per family: the python one (what ``rewardstream up`` builds) stays as small and
as quick to build as it was; a family's tree is built the first time a run needs it (``TOOLCHAINS``).
Building is idempotent and guarded by a file lock, so concurrent callers build each tree once.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from infra.local.rootfs import build_rootfs, import_tree, local_image, locked
from schemas.errors import PlatformError
from schemas.settings import PYTHON_TOOLCHAIN, Settings

#: Hex digits of a stamp's sha256 that name it: 64 bits, no collision among a host's builds.
_STAMP_ID_CHARS = 16

_SANDBOX_USER = "sandbox"
#: What an agent's commands may count on (the episode contract): ``python`` and ``python3``, pytest and git;
#: requests too, which SandboxFusion's tests import (about 2 MB). Recommends are not installed (mmdebstrap's
#: default), so git brings perl-base's needs, not perl's docs.
PACKAGES = ("python3", "python-is-python3", "python3-pytest", "python3-requests", "git")
#: The other toolchain families (``workers.languages`` maps each language onto one): Debian packages only.
#: Every family has python3 (the process backend's fork server and the in-sandbox drivers run on the tree's
#: own interpreter) and bash (Essential). Recommends are not installed.
TOOLCHAINS: dict[str, tuple[str, ...]] = {
    # c, cpp (gcc 12), rust (rustc 1.63, no cargo), go (1.19); testify for go_test (GOPATH /usr/share/gocode)
    "native": ("python3", "gcc", "g++", "libc6-dev", "rustc", "golang-go", "golang-github-stretchr-testify-dev"),
    # java (OpenJDK 17); javatuples and JUnit 5 on the classpath, as SandboxFusion's tests import them
    "jvm": ("python3", "openjdk-17-jdk-headless", "libjavatuples-java", "junit5"),
    # javascript (Node 18), typescript (tsc 4.8, transpiled), lodash as SandboxFusion's tests import it
    "node": ("python3", "nodejs", "node-typescript", "node-lodash"),
    # php 8.2, ruby 3.1, lua 5.4 (luaunit), perl 5.36 (Test::Deep, Data::Compare), as SandboxFusion's tests use
    "script": (
        "python3", "php-cli", "ruby", "lua5.4", "lua-unit", "perl", "libtest-deep-perl", "libdata-compare-perl",
    ),
    # kotlin (1.3, kotlin_script run as a compiled script), scala (2.11): JVM compilers heavier than javac,
    # with their own JRE and jars; a family of their own so jvm (java) stays as small as it is
    "jvm2": ("python3", "default-jre-headless", "kotlin", "scala"),
    # racket 8.7 (its collection tree is most of the size)
    "racket": ("python3", "racket"),
    # R 4.2 (Rscript), C# (mono 6.8 mcs), verilog (Icarus 11): the small ones together
    "extra": ("python3", "r-base-core", "mono-mcs", "mono-runtime", "iverilog"),
    # D (gdc 12): apart from extra because gcc 12's backend and libphobos are most of its size
    "d": ("python3", "gdc"),
}  # fmt: skip
#: In every family's tree: ``localhost`` resolves to the run's own loopback even where /etc/hosts is docker's
#: empty placeholder (a container without networking gets no hosts file): glibc's myhostname module, 205 kB.
_EVERY_FAMILY = ("libnss-myhostname",)
_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")


def image_version(settings: Settings) -> str:
    """The tag of ``settings.sandbox.image`` (``latest`` when untagged); it versions the rootfs too."""
    return settings.sandbox_image_version()


def _stamp(settings: Settings) -> dict[str, Any]:
    return {
        "version": image_version(settings),
        "uid": settings.sandbox.uid,
        "mirror": settings.local.debian_mirror,
        "suite": "bookworm",
        "packages": list(PACKAGES),
        "layout": 4,  # 4: localhost resolves (/etc/hosts, libnss-myhostname)
    }


def rootfs_path(settings: Settings) -> Path:
    """Where the tree for the current settings lives (it may not exist yet)."""
    return settings.sandbox_rootfs_path()


def ensure_sandbox_rootfs(settings: Settings) -> Path:
    """Build the rootfs once (mmdebstrap minbase + ``PACKAGES`` + a non-root ``sandbox`` user); return it."""
    return _ensure_rootfs(settings, rootfs_path(settings), PACKAGES, _stamp(settings))


def _family_packages(family: str) -> tuple[str, ...]:
    if family == PYTHON_TOOLCHAIN:
        return PACKAGES
    packages = TOOLCHAINS.get(family)
    if packages is None:
        raise PlatformError(f"unknown toolchain family {family!r} (known: python, {', '.join(sorted(TOOLCHAINS))})")
    return packages


def _family_stamp(settings: Settings, family: str) -> dict[str, Any]:
    if family == PYTHON_TOOLCHAIN:
        return _stamp(settings)
    return {**_stamp(settings), "family": family, "packages": list(_family_packages(family))}


def ensure_toolchain_rootfs(settings: Settings, family: str) -> Path:
    """The root filesystem of toolchain ``family``, built once on first use (``python`` is the sandbox
    rootfs itself). A rootfs named by RS_SANDBOX_ROOTFS / RS_SANDBOX_TOOLCHAINS_DIR is the platform's: it is
    used as it is, never built."""
    dest = settings.toolchain_rootfs_path(family)
    packages = _family_packages(family)
    baked = settings.sandbox.rootfs if family == PYTHON_TOOLCHAIN else settings.sandbox.toolchains_dir
    if baked is not None:
        return dest
    return _ensure_rootfs(settings, dest, packages, _family_stamp(settings, family))


def _ensure_rootfs(settings: Settings, dest: Path, packages: tuple[str, ...], wanted: dict[str, Any]) -> Path:
    stamp_file = dest.with_name(dest.name + ".json")
    with locked(dest.with_name(dest.name + ".lock")):
        if dest.is_dir() and stamp_file.is_file() and json.loads(stamp_file.read_text()) == wanted:
            return dest
        uid = settings.sandbox.uid
        hooks = [
            f'chroot "$1" groupadd --gid {uid} {_SANDBOX_USER}',
            f'chroot "$1" useradd --uid {uid} --gid {uid} --no-create-home --home-dir /work '
            f"--shell /usr/sbin/nologin {_SANDBOX_USER}",
            # Owned by the sandbox user: docker copies this ownership onto the /work tmpfs.
            f'mkdir -p "$1/work" && chown {uid}:{uid} "$1/work" && chmod 0755 "$1/work"',
            # Nothing host-specific or reusable stays inside: apt lists/caches, machine id, logs.
            'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/* "$1"/etc/machine-id',
            'rm -f "$1"/etc/hostname "$1"/etc/resolv.conf && : > "$1/etc/resolv.conf"',
            # A run's own loopback answers to its name, as on any Debian system (docker writes its own).
            'printf "127.0.0.1\\tlocalhost\\n::1\\tlocalhost ip6-localhost ip6-loopback\\n" > "$1/etc/hosts"',
        ]
        build_rootfs(
            dest,
            packages=(*packages, *_EVERY_FAMILY),
            options=[*(f"--dpkgopt=path-exclude={p}" for p in _EXCLUDES), *(f"--customize-hook={h}" for h in hooks)],
            mirrors=[settings.local.debian_mirror],
        )
        stamp_file.write_text(json.dumps(wanted))
        return dest


_STAMP_LABEL = "rewardstream.rootfs"


def _stamp_id(settings: Settings, family: str = PYTHON_TOOLCHAIN) -> str:
    digest = hashlib.sha256(json.dumps(_family_stamp(settings, family), sort_keys=True).encode()).hexdigest()
    return digest[:_STAMP_ID_CHARS]


def _image_present(docker_client: Any, tag: str, stamp: str) -> bool:
    """True when ``tag`` exists and was imported from the rootfs these settings describe."""
    image = local_image(docker_client, tag)
    return image is not None and (image.labels or {}).get(_STAMP_LABEL) == stamp


def ensure_sandbox_image(settings: Settings, docker_client: Any) -> str:
    """Make sure ``rewardstream-sandbox-python:<version>`` exists (``docker import``); return the tag."""
    return ensure_toolchain_image(settings, docker_client, PYTHON_TOOLCHAIN)


def ensure_toolchain_image(settings: Settings, docker_client: Any, family: str) -> str:
    """Make sure the image of toolchain ``family`` exists (``docker import`` of its rootfs, built first if
    missing); return the tag. The python family's is ``settings.sandbox.image``."""
    image = settings.toolchain_image(family)
    repo = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    tag = f"{repo}:{image_version(settings)}"
    stamp = _stamp_id(settings, family)
    if _image_present(docker_client, tag, stamp):
        return tag
    if family == PYTHON_TOOLCHAIN:
        rootfs = ensure_sandbox_rootfs(settings)
    else:
        rootfs = ensure_toolchain_rootfs(settings, family)
    with locked(rootfs.with_name(rootfs.name + ".lock")):
        if _image_present(docker_client, tag, stamp):
            return tag
        import_tree(
            docker_client,
            rootfs,
            repository=repo,
            tag=image_version(settings),
            changes=[
                f"USER {settings.sandbox.uid}:{settings.sandbox.uid}",
                "WORKDIR /work",
                "ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8",
                f"LABEL {_STAMP_LABEL}={stamp}",
            ],
        )
    if not _image_present(docker_client, tag, stamp):
        raise PlatformError(f"docker import did not produce {tag}")
    return tag

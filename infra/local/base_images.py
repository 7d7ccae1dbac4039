"""Local stand-ins of the official ``debian:bookworm-slim`` and ``python:3.11-slim`` images, built from Debian
packages (mmdebstrap, as the sandbox trees) because this host has no container registry.

A Harbor task's Dockerfile starts ``FROM`` one of these; its build must find the base locally. Each stand-in
copies what tasks count on in the official image (docs/design/harbor-research.md section 3): the slim dpkg
excludes and docker-* apt configuration, ``Cmd``/``Env``, root, no WORKDIR; for python, ``python``/``pip`` in
/usr/local/bin and ``pip install`` as root allowed (no ``EXTERNALLY-MANAGED``).

The host's own CA certificates (``settings.local.ca_certificates_dir``) are copied into both, and trusted
where ca-certificates is installed: this machine's egress intercepts TLS, so without them a task build's
``pip install`` (or a ``curl https://``) fails on a certificate the official image would not need. A task that
installs ca-certificates itself trusts them too (its postinst reads /usr/local/share/ca-certificates).

Each image carries the label ``rewardstream.base=<stamp>`` (a digest of its recipe): built once, rebuilt only
when the recipe changes. An image of that name without the label (really pulled, in production) is used as it
is and never replaced.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.local.rootfs import SUITE, build_rootfs, import_tree, local_image, locked
from schemas.base_images import LOCAL_BASE_IMAGES, local_base_name, official_name
from schemas.errors import PlatformError
from schemas.settings import Settings

LABEL = "rewardstream.base"
#: Bump when what a recipe makes changes without its inputs changing: every base is then rebuilt.
RECIPE_VERSION = 1
#: Hex digits of the stamp in the tag a base is imported under before it gets its names.
_BUILD_TAG_CHARS = 16
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
_CA_DIR = "/usr/local/share/ca-certificates"
#: debian:*-slim's /etc/dpkg/dpkg.cfg.d/docker (debuerreotype-slimify), in order: the last match wins.
_SLIM_DPKG = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/linda/*",
    "path-exclude=/usr/share/lintian/overrides/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/all_languages",
    "path-include=/usr/share/locale/currency/*",
    "path-include=/usr/share/locale/l10n/*",
    "path-include=/usr/share/locale/languages",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/kde/HTML/*/*",
    "path-exclude=/usr/share/gnome/help/*/*",
    "path-exclude=/usr/share/omf/*/*-*.emf",
)
_APT_CLEAN = "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"
#: debuerreotype-minimizing-config: (path, mode, content).
_DOCKER_CONFIG = (
    ("/usr/sbin/policy-rc.d", 0o755, "#!/bin/sh\nexit 101\n"),
    ("/etc/dpkg/dpkg.cfg.d/docker-apt-speedup", 0o644, "force-unsafe-io\n"),
    ("/etc/apt/apt.conf.d/docker-autoremove-suggests", 0o644, 'Apt::AutoRemove::SuggestsImportant "false";\n'),
    (
        "/etc/apt/apt.conf.d/docker-clean",
        0o644,
        f'DPkg::Post-Invoke {{ "{_APT_CLEAN}"; }};\nAPT::Update::Post-Invoke {{ "{_APT_CLEAN}"; }};\n'
        'Dir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n',
    ),
    ("/etc/apt/apt.conf.d/docker-gzip-indexes", 0o644, 'Acquire::GzipIndexes "true";\n'),
    ("/etc/apt/apt.conf.d/docker-no-languages", 0o644, 'Acquire::Languages "none";\n'),
)
#: python:3.11-slim's /usr/local/bin entry points -> Debian's.
_PYTHON_LINKS = {
    **{name: "/usr/bin/python3.11" for name in ("python", "python3", "python3.11")},
    **{name: "/usr/bin/pip3" for name in ("pip", "pip3", "pip3.11")},
}


@dataclass(frozen=True)
class _Recipe:
    name: str
    packages: tuple[str, ...]
    env: tuple[str, ...]
    cmd: str
    python: bool


_RECIPES = {
    "debian:bookworm-slim": _Recipe(
        name="debian:bookworm-slim", packages=(), env=(f"PATH={_SYSTEM_PATH}",), cmd='["bash"]', python=False
    ),
    "python:3.11-slim": _Recipe(
        name="python:3.11-slim",
        packages=(
            "python3", "python3-pip", "python3-venv", "python3-setuptools", "python3-wheel",
            "ca-certificates", "netbase", "tzdata",
        ),
        env=(f"PATH=/usr/local/bin:{_SYSTEM_PATH}", "LANG=C.UTF-8"),
        cmd='["python3"]',
        python=True,
    ),
}  # fmt: skip


def base_image_stamp(settings: Settings, name: str) -> str | None:
    """The ``rewardstream.base`` label a base named ``name`` built now carries; None for an unknown name."""
    canonical = local_base_name(name)
    return None if canonical is None else _stamp(settings, _RECIPES[canonical])


def ensure_base_image(settings: Settings, docker_client: Any, name: str) -> str | None:
    """The id of local base image ``name``, built first when missing; None when ``name`` is not a known base."""
    canonical = local_base_name(name)
    if canonical is None:
        return None
    recipe = _RECIPES[canonical]
    stamp = _stamp(settings, recipe)
    image_id = _usable(docker_client, name, stamp)
    if image_id is not None:
        return image_id
    workdir = settings.local.cache_dir / "base-images"
    slug = re.sub(r"[^a-z0-9.]+", "-", canonical)
    with locked(workdir / f"{slug}.lock"):
        image_id = _usable(docker_client, name, stamp)
        if image_id is None:
            stale = _stale(docker_client, canonical, stamp)
            image_id = _ours(docker_client, canonical, stamp)
            if image_id is None:
                image_id = _build(settings, docker_client, recipe, stamp, workdir / slug)
            else:
                _tag_names(docker_client, canonical, image_id)
            _drop(docker_client, stale)
    return image_id


def _names(canonical: str) -> list[str]:
    return [canonical, *sorted(n for n, c in LOCAL_BASE_IMAGES.items() if c == canonical and n != canonical)]


def _usable(docker_client: Any, name: str, stamp: str) -> str | None:
    """The id of ``name`` when it is ours of this recipe or not ours at all (then never replaced)."""
    image = local_image(docker_client, official_name(name))
    if image is None:
        return None
    label = (image.labels or {}).get(LABEL)
    return str(image.id) if label in (None, stamp) else None


def _ours(docker_client: Any, canonical: str, stamp: str) -> str | None:
    """The id of a base already built by this recipe under any of its names."""
    for alias in _names(canonical):
        image = local_image(docker_client, alias)
        if image is not None and (image.labels or {}).get(LABEL) == stamp:
            return str(image.id)
    return None


def _stale(docker_client: Any, canonical: str, stamp: str) -> set[str]:
    """Ids of bases built here by an older recipe under the names: untagged (dangling) once rebuilt."""
    images = (local_image(docker_client, alias) for alias in _names(canonical))
    return {str(i.id) for i in images if i is not None and (i.labels or {}).get(LABEL) not in (None, stamp)}


def _drop(docker_client: Any, image_ids: set[str]) -> None:
    """Remove the old bases; one that a task image is built on or a container uses stays (docker refuses)."""
    for image_id in image_ids:
        try:
            docker_client.images.remove(image_id)
        except Exception as exc:  # docker.errors.APIError (409 conflict); docker is optional at import time
            if type(exc).__name__ not in {"APIError", "ImageNotFound"}:
                raise


def _tag_names(docker_client: Any, canonical: str, image_id: str) -> None:
    """Tag the image with every name of its recipe but those an image not built here already holds."""
    for alias in _names(canonical):
        if not _foreign(docker_client, alias):
            docker_client.api.tag(image_id, *alias.split(":"), force=True)


def _foreign(docker_client: Any, name: str) -> bool:
    image = local_image(docker_client, name)
    return image is not None and LABEL not in (image.labels or {})


def _ca_certificates(settings: Settings) -> list[Path]:
    directory = settings.local.ca_certificates_dir
    return sorted(directory.glob("*.crt")) if directory.is_dir() else []


def _stamp(settings: Settings, recipe: _Recipe) -> str:
    """A digest of everything the image is made of: a change to any of it builds the image anew."""
    mirror = settings.local.debian_mirror
    wanted = {
        "recipe": RECIPE_VERSION,
        "name": recipe.name,
        "packages": list(recipe.packages),
        "env": list(recipe.env),
        "cmd": recipe.cmd,
        "options": _options(settings, recipe),
        "mirrors": _mirrors(mirror),
        "files": _files(mirror),
        "certificates": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in _ca_certificates(settings)},
    }
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()


def _mirrors(mirror: str) -> list[str]:
    security = _security_mirror(mirror)
    lines = [f"deb {mirror} {SUITE} main", f"deb {mirror} {SUITE}-updates main"]
    return [*lines, f"deb {security} {SUITE}-security main"] if security is not None else lines


def _security_mirror(mirror: str) -> str | None:
    """Debian's security archive beside ``mirror`` (``.../debian`` -> ``.../debian-security``), if guessable."""
    base = mirror.rstrip("/")
    return base + "-security" if base.endswith("/debian") else None


def _sources(mirror: str) -> str:
    """/etc/apt/sources.list.d/debian.sources, deb822 as in the official image, on ``mirror``."""
    stanzas = [
        f"Types: deb\nURIs: {mirror}\nSuites: {SUITE} {SUITE}-updates\nComponents: main\nSigned-By: {_KEYRING}\n"
    ]
    security = _security_mirror(mirror)
    if security is not None:
        stanzas.append(
            f"Types: deb\nURIs: {security}\nSuites: {SUITE}-security\nComponents: main\nSigned-By: {_KEYRING}\n"
        )
    return "\n".join(stanzas)


def _files(mirror: str) -> dict[str, tuple[int, str]]:
    """Files written into the finished tree (mmdebstrap removes a policy-rc.d at its end): path -> mode, text."""
    return {
        **{path: (mode, text) for path, mode, text in _DOCKER_CONFIG},
        "/etc/apt/sources.list.d/debian.sources": (0o644, _sources(mirror)),
    }


def _options(settings: Settings, recipe: _Recipe) -> list[str]:
    """mmdebstrap's options beyond minbase: the slim excludes and the hooks run in the finished chroot."""
    dpkg = [*_SLIM_DPKG, *(["path-exclude=/usr/lib/python3*/EXTERNALLY-MANAGED"] if recipe.python else [])]
    hooks = [
        f'mkdir -p "$1{_CA_DIR}"',
        *(f'install -m 0644 {shlex.quote(str(crt))} "$1{_CA_DIR}/{crt.name}"' for crt in _ca_certificates(settings)),
    ]
    if recipe.python:
        hooks += [
            'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
            *(f'ln -sf {target} "$1/usr/local/bin/{name}"' for name, target in _PYTHON_LINKS.items()),
            'chroot "$1" update-ca-certificates',
        ]
    # Nothing host-specific or reusable stays inside: apt lists/caches, machine id, logs.
    hooks += [
        'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/etc/machine-id',
        'find "$1/var/log" -type f -delete',
        'rm -f "$1/etc/hostname" "$1/etc/resolv.conf" && : > "$1/etc/resolv.conf"',
    ]
    return [
        # /usr merged the way debootstrap (and so the official image) does it: no usrmerge, hence no perl.
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
        *(f"--dpkgopt={line}" for line in dpkg),
        *(f"--customize-hook={hook}" for hook in hooks),
    ]


def _finish(tree: Path, files: dict[str, tuple[int, str]]) -> None:
    """The official image's apt/dpkg configuration: mmdebstrap's dpkg options file renamed to slim's
    ``docker``, the docker-* files, deb822 sources instead of sources.list."""
    dpkg_cfg = tree / "etc/dpkg/dpkg.cfg.d"
    (dpkg_cfg / "99mmdebstrap").rename(dpkg_cfg / "docker")
    (tree / "etc/apt/sources.list").unlink(missing_ok=True)
    for path, (mode, text) in files.items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        target.chmod(mode)


def _build(settings: Settings, docker_client: Any, recipe: _Recipe, stamp: str, tree: Path) -> str:
    mirror = settings.local.debian_mirror
    build_rootfs(tree, packages=recipe.packages, options=_options(settings, recipe), mirrors=_mirrors(mirror))
    _finish(tree, _files(mirror))
    env = list(recipe.env)
    if recipe.python:
        env.append(f"PYTHON_VERSION={_debian_python_version(tree)}")
    # Imported under a name of its own: no image that tasks name is replaced until the import is whole.
    repository, tag = f"rewardstream-base-build/{tree.name}", stamp[:_BUILD_TAG_CHARS]
    try:
        import_tree(
            docker_client,
            tree,
            repository=repository,
            tag=tag,
            changes=[*(f"ENV {e}" for e in env), f"CMD {recipe.cmd}", f"LABEL {LABEL}={stamp}"],
        )
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    image = local_image(docker_client, f"{repository}:{tag}")
    if image is None:
        raise PlatformError(f"docker import did not produce {repository}:{tag}")
    _tag_names(docker_client, recipe.name, str(image.id))
    docker_client.api.remove_image(f"{repository}:{tag}", noprune=True)
    return str(image.id)


def _debian_python_version(tree: Path) -> str:
    """The upstream version of the tree's python3.11 package (``3.11.2-6+deb12u6`` -> ``3.11.2``)."""
    status = (tree / "var/lib/dpkg/status").read_text(encoding="utf-8")
    match = re.search(r"^Package: python3\.11\n(?:[^\n]+\n)*?Version: (?:\d+:)?([^-\s]+)", status, re.MULTILINE)
    if match is None:
        raise PlatformError(f"no python3.11 package in {tree}: the python base image recipe is broken")
    return match.group(1)

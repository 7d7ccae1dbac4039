"""The image's recipe: which families, which settings it bakes in, its tag."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra.image.build import SANDBOX_DIR, all_families, image_changes, parse_families, project_version
from schemas.errors import PlatformError
from schemas.settings import Settings

ROOT = Path(__file__).resolve().parents[4]


def test_families_always_include_python_first() -> None:
    assert parse_families("all") == all_families()
    assert all_families()[0] == "python"
    assert parse_families("node, native") == ("python", "native", "node")
    with pytest.raises(PlatformError, match="unknown toolchain families \\['cobol'\\]"):
        parse_families("python,cobol")


def test_changes_point_the_settings_at_the_baked_trees() -> None:
    settings = Settings()
    changes = image_changes(settings, ("python", "native"), "abc")
    env = " ".join(c for c in changes if c.startswith("ENV "))
    assert f"RS_SANDBOX_ROOTFS={SANDBOX_DIR}/{settings.sandbox_rootfs_path().name}" in env
    assert f"RS_SANDBOX_TOOLCHAINS_DIR={SANDBOX_DIR}" in env
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "rewardstream"]' in changes
    # the names the process backend looks for inside the image are the ones the trees are appended under
    baked = Settings(sandbox_rootfs=Path(f"{SANDBOX_DIR}/x"), sandbox_toolchains_dir=Path(SANDBOX_DIR))
    assert baked.toolchain_rootfs_path("native").name == settings.toolchain_rootfs_path("native").name


def test_tag_is_the_project_version() -> None:
    declared = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert declared is not None
    assert project_version(ROOT) == declared.group(1)

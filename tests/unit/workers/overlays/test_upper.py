"""An episode's delta as an overlay's upper directory and back (as root: whiteouts are devices, owners shifted)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from workers.containers.delta import DeltaCaps, DeltaError, DeltaTooLargeError, Entry, pack_delta
from workers.overlays import ids
from workers.overlays.rootfs import shift_owners
from workers.overlays.upper import MAX_DEPTH, MAX_PATH_BYTES, read_upper, restore_upper

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="whiteouts and owners need root")


@pytest.fixture
def lower(tmp_path: Path) -> Path:
    root = tmp_path / "lower"
    for d in ("etc", "usr/share/doc/a", "app"):
        (root / d).mkdir(parents=True)
    (root / "etc/motd").write_text("image\n")
    (root / "usr/share/doc/a/README").write_text("a\n")
    (root / "usr/share/doc/b").write_text("b\n")
    (root / "app/hello.py").write_text("print()\n")
    shift_owners(root)  # as an unpacked image is
    return root


def test_a_delta_survives_the_round_trip(tmp_path: Path, lower: Path) -> None:
    delta = pack_delta(
        [
            Entry("/app/new", "dir", 0o700, 1000, 1000, 5),
            Entry("/app/new/x.py", "file", 0o644, 1000, 1000, 7, data=b"x = 1\n"),
            Entry("/app/link", "symlink", 0o777, 0, 0, 9, target="/etc/motd"),
            Entry("/etc/motd", "file", 0o600, 0, 0, 11, data=b"agent\n"),
        ],
        ["/app/hello.py", "/usr/share/doc/b"],
    )
    upper = tmp_path / "upper"
    upper.mkdir()
    restore_upper(delta, upper, lower)
    whiteout = os.lstat(upper / "app/hello.py")
    assert stat.S_ISCHR(whiteout.st_mode)
    assert whiteout.st_rdev == 0
    assert os.lstat(upper / "app/new/x.py").st_uid == ids.BASE + 1000
    assert read_upper(upper, lower, DeltaCaps()).data == delta.data


def test_a_directory_the_agent_replaced_deletes_what_the_image_had_in_it(tmp_path: Path, lower: Path) -> None:
    upper = tmp_path / "upper"
    (upper / "usr/share/doc").mkdir(parents=True)
    (upper / "usr/share/doc/README").write_text("only\n")
    shift_owners(upper)
    os.setxattr(upper / "usr/share/doc", "trusted.overlay.opaque", b"y")
    got = read_upper(upper, lower, DeltaCaps())
    assert got.deleted == ("/usr/share/doc/a", "/usr/share/doc/b")
    assert [e.path for e in got.entries] == ["/usr/share/doc", "/usr/share/doc/README"]


def test_what_no_delta_holds_is_dropped_and_caps_hold(tmp_path: Path, lower: Path) -> None:
    upper = tmp_path / "upper"
    (upper / "tmp").mkdir(parents=True)
    os.mkfifo(upper / "tmp/pipe")
    (upper / "tmp/.wh.x").write_text("")
    (upper / os.fsdecode(b"tmp/\xff")).write_text("")
    got = read_upper(upper, lower, DeltaCaps())
    assert set(got.dropped) == {"/tmp/pipe", "/tmp/.wh.x", os.fsdecode(b"/tmp/\xff")}
    (upper / "tmp/big").write_bytes(b"x" * 2048)
    with pytest.raises(DeltaTooLargeError):
        read_upper(upper, lower, DeltaCaps(max_bytes=1024))


def test_a_delta_with_a_file_inside_a_link_is_refused(tmp_path: Path, lower: Path) -> None:
    upper = tmp_path / "upper"
    upper.mkdir()
    (upper / "app").mkdir()
    (upper / "app/out").symlink_to("/etc")
    delta = pack_delta([Entry("/etc/x", "file", data=b"")], ["/app/out/motd"])
    with pytest.raises(DeltaError):
        restore_upper(delta, upper, lower)


def test_a_tree_deeper_than_the_host_walks_is_cut_not_crashed_on(tmp_path: Path, lower: Path) -> None:
    """Thousands of levels (a host path over PATH_MAX): the walk goes by fds, keeps MAX_DEPTH levels, names the cut."""
    upper = tmp_path / "upper"
    upper.mkdir()
    fd = os.open(upper, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(2100):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    got = read_upper(upper, lower, DeltaCaps())
    assert len(got.entries) == MAX_DEPTH - 1
    assert got.dropped == ("/d" * MAX_DEPTH,)
    subprocess.run(["rm", "-rf", str(upper)], check=True)  # shutil.rmtree (and pytest's cleanup) recurse


def test_a_deleted_directory_given_new_paths_is_restored_as_a_replaced_one(tmp_path: Path, lower: Path) -> None:
    """``rm -rf DIR`` then paths inside it, as a valid delta (the docker backend's restore) may spell it: the
    whiteout becomes an opaque directory, which reads back as the same state."""
    delta = pack_delta([Entry("/usr/share/doc/new", "file", 0o644, data=b"n\n")], ["/usr/share/doc"])
    upper = tmp_path / "upper"
    upper.mkdir()
    restore_upper(delta, upper, lower)
    assert os.getxattr(upper / "usr/share/doc", "trusted.overlay.opaque") == b"y"
    got = read_upper(upper, lower, DeltaCaps())
    assert got.deleted == ("/usr/share/doc/a", "/usr/share/doc/b")
    assert [e.path for e in got.entries] == ["/usr/share/doc", "/usr/share/doc/new"]


def test_deletions_under_a_file_or_link_of_the_delta_are_moot(tmp_path: Path, lower: Path) -> None:
    delta = pack_delta([Entry("/usr/share/doc", "symlink", 0o777, target="/tmp")], ["/usr/share/doc/a/README"])
    upper = tmp_path / "upper"
    upper.mkdir()
    restore_upper(delta, upper, lower)
    assert os.readlink(upper / "usr/share/doc") == "/tmp"
    assert read_upper(upper, lower, DeltaCaps()).entries == delta.entries


def test_names_past_what_a_delta_may_hold_are_not_listed(tmp_path: Path, lower: Path) -> None:
    """Dropped names (``.wh.*``, not UTF-8) count too: the walk stops at the caps (+ MAX_DROPPED), fds closed."""
    upper = tmp_path / "upper"
    (upper / "tmp/deep").mkdir(parents=True)
    for i in range(120):
        (upper / f"tmp/deep/.wh.{i}").write_text("")
    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(DeltaTooLargeError, match="over 10 changed"):
        read_upper(upper, lower, DeltaCaps(max_entries=10))
    assert len(os.listdir("/proc/self/fd")) == fds
    assert len(read_upper(upper, lower, DeltaCaps(max_entries=30)).dropped) == 100


def test_a_read_refused_past_the_caps_keeps_no_fd(tmp_path: Path, lower: Path) -> None:
    upper = tmp_path / "upper"
    for i in range(50):
        (upper / f"tmp/d/{i}").mkdir(parents=True)
    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(DeltaTooLargeError):
        read_upper(upper, lower, DeltaCaps(max_entries=10))
    assert len(os.listdir("/proc/self/fd")) == fds


def test_a_delta_of_many_deletions_and_files_restores_whole(tmp_path: Path, lower: Path) -> None:
    """10,000 deletions beside 10,000 files (which deletions a file replaces is a set lookup: a pairwise check
    was 10^8 string compares on every step of such an episode; the speed is the benchmarks' business)."""
    entries = [Entry(f"/tmp/f{i}", "file", 0o644, data=b"") for i in range(10_000)]
    delta = pack_delta(entries, [f"/var/d{i}" for i in range(10_000)])
    upper = tmp_path / "upper"
    upper.mkdir()
    restore_upper(delta, upper, lower)
    assert len(os.listdir(upper / "var")) == 10_000
    assert len(os.listdir(upper / "tmp")) == 10_000


def test_thousands_of_files_deep_down_walk_their_parents_once(
    tmp_path: Path, lower: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8,000 files 120 levels down (the reader keeps 128): their parents are looked at once, not once per file
    (a million lstat calls: half a minute of the worker's CPU on every step of such an episode)."""
    calls = [0]
    real_lstat = os.lstat

    def counted(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        calls[0] += 1
        return real_lstat(path, *args, **kwargs)

    deep = "/d" * 120
    dirs = [Entry("/d" * i, "dir", 0o755) for i in range(1, 121)]
    delta = pack_delta([*dirs, *(Entry(f"{deep}/f{i}", "file", 0o644) for i in range(8000))], [])
    upper = tmp_path / "upper"
    upper.mkdir()
    monkeypatch.setattr(os, "lstat", counted)
    restore_upper(delta, upper, lower)
    monkeypatch.undo()
    assert calls[0] < 1000  # two per parent directory at most, not 8,000 x 120
    assert read_upper(upper, lower, DeltaCaps()).data == delta.data
    subprocess.run(["rm", "-rf", str(upper)], check=True)  # shutil.rmtree (and pytest's cleanup) recurse


def test_a_path_too_long_to_restore_under_the_host_is_left_out(tmp_path: Path, lower: Path) -> None:
    """Names of 250 bytes, 15 levels down: a path the next step could not restore within the host's PATH_MAX."""
    upper = tmp_path / "upper"
    upper.mkdir()
    fd = os.open(upper, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(15):
        os.mkdir("n" * 250, dir_fd=fd)
        inner = os.open("n" * 250, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    got = read_upper(upper, lower, DeltaCaps())
    assert all(len(e.path) <= MAX_PATH_BYTES for e in got.entries)
    assert len(got.entries) == MAX_PATH_BYTES // 251
    assert [len(p) for p in got.dropped] == [251 * (MAX_PATH_BYTES // 251 + 1)]
    again = tmp_path / "again"
    again.mkdir()
    restore_upper(got, again, lower)  # what was kept restores on the host
    subprocess.run(["rm", "-rf", str(upper), str(again)], check=True)

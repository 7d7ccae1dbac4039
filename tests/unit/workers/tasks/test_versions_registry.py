"""Task versions (issue 24) in the registry: content digests, readable versions, the pointer, migration."""

from __future__ import annotations

import hashlib
import shutil
import stat
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.codec import decode, encode
from schemas.events import GenerationEvent
from schemas.registry_layout import LatestVersions, latest_pointer, read_latest, versions_dir
from schemas.tasks import PublicTask, Task, task_version
from tests.unit.workers.tasks.versions_env import RIGHT, V1, V2, WRONG, add_task, generation, legacy_registry
from workers.roles.common import TaskSource
from workers.tasks.registry import TaskNotFoundError, TaskRegistry, TaskVersionNotFoundError, file_name

# ---- the version --------------------------------------------------------------------------------------------


def test_a_version_is_the_digest_of_the_task_wire_bytes() -> None:
    assert hashlib.sha256(encode(WRONG)).hexdigest() == V1
    assert V1 != V2
    assert task_version(decode(encode(RIGHT), Task)) == V2  # the same content is the same version
    view = RIGHT.public()
    assert view.task_version == V2
    assert b"hidden" not in encode(view)
    assert decode(encode(view), PublicTask) == view
    unversioned = view.model_copy(update={"task_version": None})
    assert b"task_version" not in encode(unversioned)  # a view that names none encodes as before versions


def test_events_leave_the_version_out_unless_set() -> None:
    plain = generation()
    assert b"task_version" not in encode(plain)
    pinned = generation(task_version=V1)
    assert orjson.loads(encode(pinned))["task_version"] == V1
    assert decode(encode(pinned), GenerationEvent).task_version == V1
    for bad in ("abc", V1.upper(), V1 + "0"):
        with pytest.raises(ValueError, match="task_version"):
            generation(task_version=bad)


# ---- the registry -------------------------------------------------------------------------------------------


def test_every_version_stays_readable_and_latest_follows_the_loads(tmp_path: Path) -> None:
    registry = TaskRegistry(tmp_path)
    first = registry.store([WRONG])
    assert (first.added, first.versions, first.replaced) == (("T/1",), {"T/1": V1}, {})
    assert registry.latest_version("T/1") == V1
    second = registry.store([RIGHT])
    assert (second.updated, second.versions, second.replaced) == (("T/1",), {"T/1": V2}, {"T/1": V1})
    assert second.as_json()["versions"] == {"T/1": V2}
    assert second.as_json()["replaced"] == {"T/1": V1}
    assert registry.latest_version("T/1") == V2
    assert registry.versions("T/1") == [V1, V2]
    assert registry.task("T/1") == RIGHT
    assert registry.task("T/1", V1) == WRONG  # the old version stays readable
    assert registry.public("T/1", V1) == WRONG.public()
    assert registry.public("T/1").task_version == V2
    assert registry.store([RIGHT]).unchanged == ("T/1",)
    back = registry.store([WRONG])  # going back is a move of the pointer, no new version
    assert (back.updated, back.replaced) == (("T/1",), {"T/1": V2})
    assert registry.latest_version("T/1") == V1
    assert registry.versions("T/1") == [V1, V2]


def test_version_files_keep_the_public_hidden_split(tmp_path: Path) -> None:
    registry = TaskRegistry(tmp_path)
    registry.store([WRONG])
    registry.store([RIGHT])
    hidden_dir, public_dir = versions_dir(tmp_path, "T/1", hidden=True), versions_dir(tmp_path, "T/1", hidden=False)
    for version in (V1, V2):
        hidden_file, public_file = hidden_dir / f"{version}.json", public_dir / f"{version}.json"
        assert hashlib.sha256(hidden_file.read_bytes()).hexdigest() == version
        assert stat.S_IMODE(hidden_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(public_file.stat().st_mode) == 0o644
        assert b"hidden_tests" not in public_file.read_bytes()
        assert decode(public_file.read_bytes(), PublicTask).task_version == version
    assert stat.S_IMODE(hidden_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(hidden_dir.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(public_dir.stat().st_mode) == 0o755
    pointer = latest_pointer(tmp_path, "T/1")
    assert pointer.read_bytes() == V2.encode() + b"\n"
    assert stat.S_IMODE(pointer.stat().st_mode) == 0o644
    # the latest views where they always were, as before versions: older readers keep reading them
    assert (tmp_path / "hidden" / file_name("T/1")).read_bytes() == encode(RIGHT)
    legacy_public = (tmp_path / "public" / file_name("T/1")).read_bytes()
    assert legacy_public == encode(RIGHT.public().model_copy(update={"task_version": None}))
    assert registry.ids() == ["T/1"]
    assert not list(tmp_path.rglob(".tmp-*"))


def test_unknown_versions_and_tasks_say_which(tmp_path: Path) -> None:
    registry = TaskRegistry(tmp_path)
    registry.store([WRONG])
    with pytest.raises(TaskVersionNotFoundError, match=f"no version {V2} of task 'T/1'"):
        registry.task("T/1", V2)
    with pytest.raises(TaskVersionNotFoundError, match=f"no version {V2} of task 'T/1'"):
        registry.public("T/1", V2)
    with pytest.raises(TaskVersionNotFoundError, match="is not a task version"):
        registry.public("T/1", "../../etc/passwd")
    with pytest.raises(TaskNotFoundError, match="no task 'No/such'"):
        registry.latest_version("No/such")
    with pytest.raises(TaskNotFoundError, match="no task 'No/such'"):
        registry.public("No/such", V1)
    with pytest.raises(TaskNotFoundError, match="is not a task id"):
        registry.public("..")


def test_a_version_file_that_does_not_hold_its_version_is_refused(tmp_path: Path) -> None:
    registry = TaskRegistry(tmp_path)
    registry.store([WRONG])
    (versions_dir(tmp_path, "T/1", hidden=True) / f"{V1}.json").write_bytes(encode(RIGHT))
    with pytest.raises(Exception, match="does not hold version"):
        registry.task("T/1", V1)


def test_a_registry_stored_before_versions_reads_as_its_own_digest(tmp_path: Path) -> None:
    legacy_registry(tmp_path, WRONG)
    registry = TaskRegistry(tmp_path)
    assert registry.latest_version("T/1") == V1
    assert registry.versions("T/1") == [V1]
    assert registry.task("T/1", V1) == WRONG
    assert registry.public("T/1", V1) == WRONG.public()
    assert registry.public("T/1") == WRONG.public()
    with pytest.raises(TaskVersionNotFoundError):
        registry.task("T/1", V2)
    assert LatestVersions(tmp_path)("T/1") is None  # no pointer: a producer cannot pin, the roles take the latest
    source = TaskSource(registry)
    assert source.task("T/1").version == V1
    assert source.public("T/1").task == WRONG.public()


def test_a_public_only_copy_of_an_old_registry_still_serves_its_views(tmp_path: Path) -> None:
    legacy_registry(tmp_path, WRONG)
    shutil.rmtree(tmp_path / "hidden")  # e.g. a trainer's machine syncing public/ only
    read = TaskSource(TaskRegistry(tmp_path)).public("T/1")
    assert read.version is None  # it cannot compute the digest: the results say so
    assert read.task.prompt == WRONG.prompt


def test_the_next_load_migrates_an_old_registry(tmp_path: Path) -> None:
    legacy_registry(tmp_path, WRONG, add_task(7, "U/1"))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.json")}
    report = TaskRegistry(tmp_path).store([RIGHT])
    assert report.migrated == ("T/1", "U/1")
    assert (report.updated, report.replaced) == (("T/1",), {"T/1": V1})
    assert read_latest(tmp_path, "U/1") == task_version(add_task(7, "U/1"))
    assert read_latest(tmp_path, "T/1") == V2
    assert TaskRegistry(tmp_path).task("T/1", V1) == WRONG  # the old version kept as its own
    untouched = tmp_path / "public" / file_name("U/1")
    assert untouched.read_bytes() == before[untouched]


# ---- the pointer, as producers read it ----------------------------------------------------------------------


def test_latest_versions_for_producers(tmp_path: Path) -> None:
    latest = LatestVersions(tmp_path)
    assert latest("T/1") is None  # no registry there at all
    TaskRegistry(tmp_path).store([WRONG])
    assert latest("T/1") == V1
    TaskRegistry(tmp_path).store([RIGHT])
    assert latest("T/1") == V2  # the pointer's identity is checked each time: never a stale version
    TaskRegistry(tmp_path).store([WRONG])  # a pointer of the same size, replaced within the same second
    assert latest("T/1") == V1
    assert latest("No/such") is None
    assert latest("..") is None
    TaskRegistry(tmp_path).store([add_task(1, "No/such")])
    assert latest("No/such") == task_version(add_task(1, "No/such"))  # a miss is not remembered as final


@settings(max_examples=200, deadline=None)
@given(content=st.binary(max_size=300))
def test_any_pointer_content_is_a_version_or_none(tmp_path_factory: pytest.TempPathFactory, content: bytes) -> None:
    root = tmp_path_factory.mktemp("reg")
    pointer = latest_pointer(root, "T/1")
    pointer.parent.mkdir(parents=True)
    pointer.write_bytes(content)
    got = LatestVersions(root)("T/1")
    assert got is None or (len(got) == 64 and content.strip().decode() == got)


@settings(max_examples=300, deadline=None)
@given(task_id=st.text(max_size=40))
def test_any_task_id_stays_inside_the_registry(tmp_path_factory: pytest.TempPathFactory, task_id: str) -> None:
    root = tmp_path_factory.mktemp("reg") / "r"
    (root.parent / "latest").write_text(V1)  # bait one level up
    assert LatestVersions(root)(task_id) is None
    try:
        path = latest_pointer(root, task_id)
    except ValueError:
        return
    assert path.resolve().is_relative_to(root.resolve())

"""The pure parts of grading an episode's submit: the original snapshot, the diff the judge reads, the
workspace job the harness gets, and the roles' refusals (no sandbox, no services)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from schemas.events import GenerationEvent
from schemas.tasks import Archive, CommandSuite, IoSuite, Limits, Task, Workspace, task_version
from tests.unit.workers.grading.test_workspace_task_refusals import NoSandbox
from workers.artifacts import ArtifactError
from workers.episodes.diff import MAX_FILE_CHARS, changes, judged_code
from workers.episodes.originals import BrokenOriginalError, caps_of, original_snapshot, task_original
from workers.episodes.snapshot import Caps, SnapshotError, pack
from workers.grading import Grader
from workers.grading.grader import WorkspaceTaskError
from workers.grading.suites import WORKSPACE_FILES, WorkspaceJob, build_spec, harness_program, job_suite, new_nonce
from workers.handler import InvalidEventError
from workers.roles.common import RoleContext, TaskSource
from workers.roles.workspace import EpisodeWorkspaces, WorkspaceEventError
from workers.sandbox.guest import harness_workspace, typed_values
from workers.tasks.registry import TaskRegistry

CAPS = Caps(max_bytes=1 << 20, max_entries=100)
FILES = {"pkg/__init__.py": "", "pkg/mod.py": "def f():\n    return 1\n", "README": "hi\n"}


def snap(tmp_path: Path, files: dict[str, str | bytes], links: dict[str, str] | None = None) -> bytes:
    root = tmp_path / f"s{len(list(tmp_path.iterdir()))}"
    root.mkdir()
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data.encode() if isinstance(data, str) else data)
    for name, target in (links or {}).items():
        (root / name).symlink_to(target)
    return pack(root, CAPS).data


def test_an_inline_original_is_the_canonical_snapshot_of_its_files(tmp_path: Path) -> None:
    made = original_snapshot(Workspace(files=FILES), CAPS, lambda url: pytest.fail(f"fetched {url}")).data
    assert made == snap(tmp_path, dict(FILES))


def test_an_archive_original_must_match_its_sha256(tmp_path: Path) -> None:
    data = gzip.compress(snap(tmp_path, dict(FILES)))
    archive = Archive(url="s3://tasks/a.tar.gz", sha256=hashlib.sha256(data).hexdigest())
    assert original_snapshot(Workspace(archive=archive), CAPS, lambda _url: data).data == snap(tmp_path, dict(FILES))
    with pytest.raises(SnapshotError, match="does not match its sha256"):
        original_snapshot(Workspace(archive=archive), CAPS, lambda _url: data + b"x")


class Archives:
    """Task archives by URL; a URL not there fails as S3 would: ``outage`` or a refusal."""

    def __init__(self, data: dict[str, bytes], *, outage: bool = False) -> None:
        self.data, self.outage = data, outage

    def get(self, url: str) -> bytes:
        if url not in self.data:
            raise ArtifactError(f"no object {url}", outage=self.outage)
        return self.data[url]


def test_a_tasks_broken_archive_is_the_tasks_fault_and_an_outage_is_retried(tmp_path: Path) -> None:
    """The episode worker and the grading roles make a task's original through ``task_original``: what is
    wrong with the task is BrokenOriginalError (no episode starts, the event is invalid); an outage raises."""
    data = gzip.compress(snap(tmp_path, dict(FILES)))
    archive = Archive(url="s3://tasks/a.tar.gz", sha256=hashlib.sha256(data).hexdigest())
    task = Task.model_validate({
        "task_id": "W/2", "prompt": "", "entry_point": "m:f", "workspace": {"archive": archive.model_dump()},
        "hidden_tests": {"kind": "call", "cases": [{"args": [], "expected": 1}]},
    })  # fmt: skip
    assert task_original(task, Archives({archive.url: data})).data == snap(tmp_path, dict(FILES))
    with pytest.raises(BrokenOriginalError, match="archive cannot be read: no object"):
        task_original(task, Archives({}))
    with pytest.raises(BrokenOriginalError, match="has no store"):
        task_original(task, None)
    with pytest.raises(BrokenOriginalError, match="does not match its sha256"):
        task_original(task, Archives({archive.url: data + b"x"}))
    with pytest.raises(BrokenOriginalError, match="not usable"):
        task_original(task, Archives({archive.url: gzip.compress(b"no tar at all" * 100)}))
    with pytest.raises(ArtifactError) as outage:
        task_original(task, Archives({}, outage=True))
    assert outage.value.outage
    assert not isinstance(outage.value, BrokenOriginalError)


def test_changes_name_what_was_added_modified_and_deleted(tmp_path: Path) -> None:
    before = snap(tmp_path, dict(FILES), links={"l": "a"})
    after = snap(tmp_path, {**FILES, "pkg/mod.py": "def f():\n    return 2\n", "new.py": "x = 1\n"}, links={"l": "b"})
    found = {c.path: c.kind for c in changes(before, after)}
    assert found == {"pkg/mod.py": "modified", "new.py": "added", "l": "modified"}
    gone = {c.path: c.kind for c in changes(after, before)}
    assert gone["new.py"] == "deleted"


def test_the_judge_reads_the_entry_module_first_and_only_text_within_its_caps(tmp_path: Path) -> None:
    before = snap(tmp_path, dict(FILES))
    huge = "x = 1\n" * (MAX_FILE_CHARS // 6 + 1)
    after = snap(tmp_path, {**FILES, "a.py": "y = 2\n", "bin.py": b"\xff\x00", "big.py": huge, "data.bin": b"\x00"})
    code = judged_code(changes(before, after), "pkg/mod.py", b"def f():\n    return 1\n")
    assert code.startswith("# --- pkg/mod.py\ndef f():")
    assert "# --- a.py\ny = 2" in code
    assert "# bin.py: not UTF-8 text, not shown" in code
    assert "# big.py:" in code
    assert "too large" in code
    assert "# data.bin: added" in code
    assert len(code) < 2 * MAX_FILE_CHARS


def test_a_command_suite_is_one_io_case_and_an_io_command_travels_as_argv() -> None:
    job = job_suite(CommandSuite(kind="command", command="python3 -m pytest -q"), 5.0)
    assert job.kind == "io"
    assert job.payload["command"] == ["/bin/sh", "-c", "python3 -m pytest -q"]
    assert job.payload["cases"] == [{"id": "command", "stdin": ""}]
    io_suite = IoSuite.model_validate(
        {"kind": "io", "command": ["python3", "-m", "calc"], "cases": [{"stdin": "1", "expected_stdout": "2"}]}
    )
    payload = job_suite(io_suite, 5.0).payload
    assert payload["command"] == ["python3", "-m", "calc"]
    assert "expected_stdout" not in json.dumps(payload)


def test_a_workspace_job_ships_the_tar_and_room_for_it_restored() -> None:
    tar = b"t" * (40 << 20)
    ws = WorkspaceJob(tar, bytes=40 << 20, entries=3000)
    harness = harness_program()
    spec = build_spec(code="", entry_point="calc.ops:add", suites=[], memory_mb=512, startup_grace_s=5.0,
                      harness=harness, nonce=new_nonce(), workspace=ws)  # fmt: skip
    assert spec.files[WORKSPACE_FILES["tar"]] is tar
    header = json.loads(spec.stdin.removeprefix(harness.stdin()).split(b"\n")[1])
    assert header["workspace"]["dir"] == "ws"
    assert header["workspace"]["env"]["PYTHONSAFEPATH"] == "1"
    assert spec.workdir_size_mb * (1 << 20) >= 2 * len(tar)
    assert spec.workdir_inodes > 3000


def test_the_one_shot_grader_never_runs_a_command() -> None:
    suite = CommandSuite(kind="command", command="true")
    with pytest.raises(WorkspaceTaskError):
        Grader(NoSandbox()).run_suites("print(1)", None, [("public", suite)], Limits())


def test_the_harness_restores_a_workspace_in_its_own_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    (work / "ws.tar").write_bytes(snap(tmp_path, dict(FILES), links={"pkg/up": "/etc"}))
    ws = harness_workspace.Workspace.prepare({**WORKSPACE_FILES, "env": {"HOME": "/tmp"}})
    assert os.getcwd() == str(work)
    assert sorted(os.listdir(work)) == [".rs-pycache", ".rs-site", "ws"]  # the tar is gone
    assert (work / "ws/pkg/mod.py").read_text() == FILES["pkg/mod.py"]
    assert os.readlink(work / "ws/pkg/up") == "/etc"
    assert ws.env["PYTHONPATH"] == str(work / ".rs-site")
    assert "sys.path.append" in (work / ".rs-site/sitecustomize.py").read_text()
    for bad in ("../x", "..", ""):
        with pytest.raises(typed_values.HarnessError):
            harness_workspace.Workspace.prepare({**WORKSPACE_FILES, "dir": bad, "env": {}})


def _context(tmp_path: Path, tasks: list[Task], artifacts: Any = None) -> RoleContext:
    registry = TaskRegistry(tmp_path / "tasks")
    registry.store(tasks)
    return RoleContext(role="verifier", worker="h:1", tasks=TaskSource(registry), artifacts=artifacts, output_topic="o")


def _event(task_id: str) -> GenerationEvent:
    return GenerationEvent(generation_id="e", episode_id="e", run_id="r", task_id=task_id, policy_version="p",
                           workspace_ref="s3://bkt/sha256/ab/x", workspace_sha256="a" * 64)  # fmt: skip


def test_a_workspace_generation_of_a_one_shot_task_is_an_invalid_event(tmp_path: Path) -> None:
    hidden = {"kind": "call", "cases": [{"args": [], "expected": 1}]}
    one_shot = Task.model_validate({"task_id": "T/1", "prompt": "", "entry_point": "f", "hidden_tests": hidden})
    workspaces = EpisodeWorkspaces(_context(tmp_path, [one_shot]))
    with pytest.raises(WorkspaceEventError, match="not a workspace task"):
        workspaces.graded(_event("T/1"), one_shot, task_version(one_shot))
    assert issubclass(WorkspaceEventError, InvalidEventError)


def test_caps_follow_the_task(tmp_path: Path) -> None:
    task = Task.model_validate({
        "task_id": "W/1", "prompt": "", "entry_point": "m:f", "workspace": {"files": {"m.py": ""}},
        "episode": {"workspace_max_mb": 3, "workspace_max_files": 77},
        "hidden_tests": {"kind": "call", "cases": [{"args": [], "expected": 1}]},
    })  # fmt: skip
    assert caps_of(task.episode_limits) == Caps(3 << 20, 77)
    made = original_snapshot(task.workspace, caps_of(task.episode_limits), bytes)  # type: ignore[arg-type]
    with tarfile.open(fileobj=io.BytesIO(made.data)) as tar:
        assert tar.getnames() == ["m.py"]


def test_the_judge_reads_an_episodes_stored_transcript_and_only_a_content_addressed_one(tmp_path: Path) -> None:
    """The judge scores the changes and the transcript the generation names (a ``transcript_ref`` that is not
    our content address is ignored: the changes are judged alone)."""
    from schemas.episodes import ActionEvent, ObservationEvent
    from schemas.status import SandboxStatus
    from tests.sandbox.swe_task import OPS_FIXED, task
    from tests.sandbox.swe_task import snapshot as swe_snapshot
    from tests.unit.workers.episodes.test_workspaces import DictStore
    from workers.episodes.transcript import document, noted
    from workers.episodes.turns import EpisodeState
    from workers.handler import Done, Source
    from workers.judge.base import JudgeOutcome, JudgeRequest
    from workers.judge.cache import CachedJudge
    from workers.roles.judging import JudgeHandler

    class Recording:
        model, prompt_version = "rec/1", "rec/1"

        def __init__(self) -> None:
            self.requests: list[JudgeRequest] = []

        def score(self, request: JudgeRequest) -> JudgeOutcome:
            self.requests.append(request)
            return JudgeOutcome(0.5, "ok", None, self.model, self.prompt_version, 1.0)

        def close(self) -> None:
            pass

    store = DictStore()
    final = swe_snapshot({"calc/ops.py": OPS_FIXED})
    ws_url = store.put(final).url
    state = EpisodeState("ep", "swe/calc-call", 2, hashlib.sha256(final).hexdigest(), 0.0, 0.0)
    exec_true = {"action": "exec", "command": "true"}
    action = ActionEvent.model_validate({"episode_id": "ep", "turn": 2, "action": exec_true})
    seen = ObservationEvent.build(episode_id="ep", turn=2, action="exec", status=SandboxStatus.OK, exit_code=0)
    stored = store.put(document(noted(state, action, seen))).url
    registry = TaskRegistry(tmp_path / "tasks")
    registry.store([task("call", "swe/calc-call")])
    context = RoleContext(role="judge", worker="h:1", tasks=TaskSource(registry), artifacts=store,  # type: ignore[arg-type]
                          output_topic="o")  # fmt: skip
    inner = Recording()
    handler = JudgeHandler(context, CachedJudge(inner, max_entries=0))
    base = GenerationEvent(generation_id="ep", episode_id="ep", run_id="r", task_id="swe/calc-call",
                           policy_version="p", workspace_ref=ws_url, workspace_sha256=state.snapshot)  # fmt: skip
    for event in (base.model_copy(update={"transcript_ref": stored}),
                  base.model_copy(update={"transcript_ref": "s3://elsewhere/any/object"}), base):  # fmt: skip
        assert isinstance(handler.handle(event, Source("g", 0, 1)), Done)
    with_it, foreign, without = inner.requests
    assert with_it.transcript is not None
    assert [s.line() for s in with_it.transcript] == ["turn 2 exec true: ok (exit 0)"]
    assert "a + b" not in with_it.transcript_text()  # the steps, never the code or any output
    assert "return int(fractions.Fraction(a) + fractions.Fraction(b))" in with_it.code
    assert foreign.transcript is None
    assert without.transcript is None

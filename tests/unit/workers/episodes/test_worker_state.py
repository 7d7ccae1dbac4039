"""The episode worker's state between actions (pure: rows as bytes, no Kafka): the changelog row, the table
of owned partitions and its epochs, the lookup of a fork's source, the original workspace, what is sent."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from schemas.episodes import ActionEvent
from schemas.status import REJECTED, SandboxStatus
from schemas.tasks import Archive, Workspace
from workers.episodes.observe import UNKNOWN, end_observation, step_observation, submitted
from workers.episodes.originals import original_snapshot
from workers.episodes.snapshot import Caps, SnapshotError, pack
from workers.episodes.sources import CommittedEpisodes
from workers.episodes.step import StepOutcome
from workers.episodes.table import EpisodeTable, StaleRunError, dumps, loads
from workers.episodes.turns import EpisodeState
from workers.handler import Source

STATE = EpisodeState("ep-1", "swe/calc-1", 3, "c" * 64, 1000.0, 1010.0, run_id="r", policy_version="p",
                     history=((0, "a" * 64), (2, "c" * 64)))  # fmt: skip
CAPS = Caps(max_bytes=1 << 20, max_entries=50)


def _event(turn: int, **action: object) -> ActionEvent:
    return ActionEvent.model_validate({"episode_id": "ep-1", "turn": turn, "action": action})


def test_a_row_is_the_state_and_nothing_else_is() -> None:
    assert loads(dumps(STATE)) == STATE
    assert loads(dumps(EpisodeState("e", "t", 0, "s", 1.0, 1.0))).ended is None
    for bad in (b"", b"{}", b'{"episode_id": 3}', b"\xff"):
        with pytest.raises(ValueError, match="validation error"):
            loads(bad)


def test_the_table_is_what_was_restored_plus_what_steps_made_and_bad_rows_are_left_out() -> None:
    rows = {"ep-1": dumps(STATE), "junk": b"not a state"}
    table = EpisodeTable(lambda partition: rows if partition == 1 else {})
    table.assigned("rs.actions", 1, epoch=7)
    source = Source("rs.actions", 1, 40, epoch=7)
    assert table.get(source, "ep-1") == STATE
    assert table.get(source, "junk") is None
    later = EpisodeState("ep-2", "t", 0, "s", 1.0, 1.0)
    table.put(source, later)
    assert table.get(source, "ep-2") == later


def test_ended_episodes_are_listed_apart_and_forgotten_only_in_the_current_assignment() -> None:
    done = EpisodeState("ep-2", "t", 4, "s", 1.0, 2.0, ended="submitted")
    table = EpisodeTable(lambda _partition: {"ep-1": dumps(STATE), "ep-2": dumps(done)})
    table.assigned("rs.actions", 0, epoch=3)
    assert table.ended(0, 3) == [done]
    assert table.running(0, 3) == [STATE]
    with pytest.raises(StaleRunError):
        table.forget_at(0, 2, "ep-2")
    table.forget_at(0, 3, "ep-2")
    assert table.ended(0, 3) == []
    assert table.get(Source("rs.actions", 0, 9, epoch=3), "ep-2") is None
    assert table.get(Source("rs.actions", 0, 9, epoch=3), "ep-1") == STATE


def test_a_run_from_an_earlier_assignment_can_neither_read_nor_write() -> None:
    """After a rewind (an aborted transaction) the partition is restored under a new epoch: a run that was
    still going must not leave its uncommitted state in the table the re-run reads."""
    table = EpisodeTable(lambda _partition: {"ep-1": dumps(STATE)})
    table.assigned("rs.actions", 0, epoch=1)
    old = Source("rs.actions", 0, 5, epoch=1)
    table.assigned("rs.actions", 0, epoch=2)
    with pytest.raises(StaleRunError):
        table.get(old, "ep-1")
    with pytest.raises(StaleRunError):
        table.put(old, EpisodeState("ep-1", "t", 9, "s", 1.0, 1.0))
    assert table.get(Source("rs.actions", 0, 5, epoch=2), "ep-1") == STATE
    table.revoked("rs.actions", 0)
    with pytest.raises(StaleRunError):
        table.get(Source("rs.actions", 0, 5, epoch=2), "ep-1")


def test_a_fork_source_is_found_on_any_partition_and_each_is_read_only_from_where_it_ended() -> None:
    log: dict[int, list[tuple[str, bytes]]] = {0: [], 1: [("ep-1", dumps(STATE))], 2: []}
    reads: list[tuple[int, int]] = []

    def catch_up(partition: int, rows: dict[str, bytes], start: int) -> int:
        reads.append((partition, start))
        for key, value in log[partition][start:]:
            rows[key] = value
        return len(log[partition])

    committed = CommittedEpisodes(3, catch_up)
    assert committed.get("ep-1") == STATE
    assert committed.get("nope") is None
    log[2].append(("ep-9", dumps(EpisodeState("ep-9", "t", 1, "s", 1.0, 1.0))))
    found = committed.get("ep-9")
    assert found is not None
    assert found.turn == 1
    assert reads == [(0, 0), (1, 0), (0, 0), (1, 1), (2, 0), (0, 0), (1, 1), (2, 0)]


def test_the_original_workspace_is_canonical_whether_inline_or_an_archive(tmp_path: Path) -> None:
    files = {"calc/__init__.py": "", "calc/ops.py": "def add(a, b):\n    return a - b\n"}
    inline = original_snapshot(Workspace(files=files), CAPS, lambda _url: b"")
    assert inline == original_snapshot(Workspace(files=dict(reversed(files.items()))), CAPS, lambda _url: b"")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            info.mode = 0o4755  # a setuid bit never survives
            tar.addfile(info, io.BytesIO(text.encode()))
    data = buffer.getvalue()
    archive = Workspace(archive=Archive(url="s3://bucket/ws.tar.gz", sha256=hashlib.sha256(data).hexdigest()))
    from_archive = original_snapshot(archive, CAPS, lambda url: data if url == "s3://bucket/ws.tar.gz" else b"")
    root = tmp_path / "w"
    (root / "calc").mkdir(parents=True)
    for name, text in files.items():
        (root / name).write_text(text)
        (root / name).chmod(0o755)
    assert from_archive.sha256 == pack(root, CAPS).sha256
    with pytest.raises(SnapshotError, match="does not match its sha256"):
        original_snapshot(archive, CAPS, lambda _url: data + b"x")


def test_a_step_observation_keeps_only_what_its_action_may_have() -> None:
    outcome = StepOutcome(SandboxStatus.NONZERO_EXIT, b"tar", "d" * 64, exit_code=3, stdout=b"out\xff", stderr=b"err",
                          wall_ms=12.5)  # fmt: skip
    obs = step_observation(_event(4, action="exec", command="false"), outcome, "s3://bucket/sha256/dd/" + "d" * 64)
    assert (obs.status, obs.exit_code, obs.stdout, obs.stderr, obs.wall_ms) == ("nonzero_exit", 3, "out\ufffd",
                                                                                "err", 12.5)  # fmt: skip
    read = StepOutcome(SandboxStatus.OK, b"tar", "d" * 64, exit_code=0, content=b"text")
    assert step_observation(_event(5, action="read", path="a"), read, "s3://bucket/k").exit_code is None
    missing = StepOutcome(REJECTED, b"tar", "d" * 64, reason="a: no such file")
    rejected = step_observation(_event(5, action="read", path="a"), missing, "s3://bucket/k", ended="max_turns")
    assert (rejected.status, rejected.reason, rejected.content, rejected.ended) == ("rejected", "a: no such file",
                                                                                    None, "max_turns")  # fmt: skip


def test_an_end_says_why_and_its_generation_names_the_final_workspace() -> None:
    submit = end_observation(_event(4, action="submit"), "submitted", "s3://bucket/k")
    assert (submit.action, submit.status, submit.ended) == ("submit", "ok", "submitted")
    late = end_observation(_event(4, action="exec", command="true"), "episode_timeout", "s3://bucket/k")
    assert (late.action, late.status, late.ended) == ("exec", "timeout", "episode_timeout")
    generation = submitted(STATE, "s3://bucket/k")
    assert (generation.generation_id, generation.episode_id, generation.turn) == ("ep-1", "ep-1", 3)
    assert (generation.workspace_ref, generation.workspace_sha256, generation.code) == ("s3://bucket/k", "c" * 64, None)
    anonymous = submitted(EpisodeState("e", "t", 1, "c" * 64, 1.0, 1.0), "s3://bucket/k")
    assert (anonymous.run_id, anonymous.policy_version) == (UNKNOWN, UNKNOWN)

"""``episode play`` reads the whole transcript before it sends anything: each bad line is named by its number."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rewardstream.cli.episode import read_actions
from schemas.episodes import ExecAction, ReadAction, SubmitAction, WriteAction
from schemas.errors import ValidationError


def _file(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    return path


def test_a_transcript_is_its_actions_in_order(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        b'{"action": "read", "path": "calc/ops.py"}\n\n'
        b'{"action": "exec", "command": "python -m pytest -q", "timeout_s": 10}\n'
        b'{"action": "write", "path": "calc/ops.py", "base64": "eA=="}\n{"action": "submit"}\n',
    )
    actions = read_actions(path)
    assert [type(a) for a in actions] == [ReadAction, ExecAction, WriteAction, SubmitAction]
    assert isinstance(actions[1], ExecAction)
    assert actions[1].timeout_s == 10


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"action": "read", "path": "a"}\n{not json\n', ":2: not JSON"),
        (b'{"action": "dance"}\n', ":1: action: "),
        (b'{"action": "open", "task_id": "swe/x"}\n', ":1: open is not a step"),
        (b'{"action": "fork", "from_episode": "e", "turn": 1}\n', ":1: fork is not a step"),
        (b'{"action": "submit"}\n{"action": "read", "path": "a"}\n', ":2: an action after the submit"),
        (b'["action"]\n', ":1: "),
        (b"\n\n", ": no actions"),
        (b'{"action": "exec", "command": ' + b"[" * 5000 + b"]" * 5000 + b"}\n", ":1: not JSON"),
    ],
)
def test_a_bad_transcript_names_its_line(tmp_path: Path, data: bytes, message: str) -> None:
    path = _file(tmp_path, data)
    with pytest.raises(ValidationError) as caught:
        read_actions(path)
    assert f"{path}{message}" in str(caught.value)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="cannot read"):
        read_actions(tmp_path / "nope.jsonl")


@given(st.lists(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)), max_size=8))
def test_any_bytes_are_actions_or_a_validation_error(lines: list[bytes]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "t.jsonl")
        path.write_bytes(b"\n".join(lines))
        problem: ValidationError | None = None
        try:
            actions = read_actions(path)
        except ValidationError as exc:
            problem = exc
        if problem is None:
            assert actions
        else:
            assert str(path) in str(problem)


def test_a_reward_that_does_not_come_is_a_clear_error() -> None:
    from concurrent.futures import Future

    from rewardstream.cli.episode import wait_reward
    from schemas.events import RewardEvent
    from streams.sdk.episodes import Episode, EpisodeError

    never: Future[RewardEvent] = Future()
    with pytest.raises(EpisodeError, match=r"^no reward for episode 'ep-x' within 0.05s$"):
        wait_reward(Episode(None, "ep-x", 3), never, 0.05)  # type: ignore[arg-type]

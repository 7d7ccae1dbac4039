"""A model's reply becomes one action of the contract or a clear observation, never an exception; the gym
env and the verl tool answer a bad reply without sending anything."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.episodes import ExecAction, ObservationEvent, ReadAction, SubmitAction, WriteAction
from schemas.status import SandboxStatus
from streams.sdk.agent_text import ACTION_HELP, BadAction, parse_action, render_observation
from streams.sdk.episodes import EpisodeError
from streams.sdk.gym_env import EpisodeEnv, SkyRLEpisodeEnv
from streams.sdk.verl_tool import VerlEpisodeTool


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        ('{"action": "read", "path": "calc/ops.py"}', ReadAction),
        ('{"action": "exec", "command": "python -m pytest -q", "timeout_s": 10}', ExecAction),
        ('{"action": "exec", "command": ["python", "-m", "pytest"]}', ExecAction),
        ('{"action": "write", "path": "calc/ops.py", "text": "x = 1\\n"}', WriteAction),
        ('{"action": "write", "path": "a.bin", "base64": "eA=="}', WriteAction),
        ('{"action": "submit"}', SubmitAction),
        ('I will look first.\n```json\n{"action": "read", "path": "calc/ops.py"}\n```\n', ReadAction),
        ('Let me run: {"action": "exec", "command": "ls"} and see.', ExecAction),
        ('```\n{"action": "submit"}\n```', SubmitAction),
    ],
)
def test_the_contracts_objects_bare_fenced_or_in_prose_are_actions(reply: str, kind: type) -> None:
    assert isinstance(parse_action(reply), kind)


def test_an_exec_keeps_its_command_and_timeout() -> None:
    action = parse_action('{"action": "exec", "command": "python -m pytest -q", "timeout_s": 10}')
    assert isinstance(action, ExecAction)
    assert (action.command, action.timeout_s) == ("python -m pytest -q", 10)


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        ("I think the bug is in add.", "no JSON object"),
        ('{"action": "read", "path": ', "not valid JSON"),
        ('{"action": "dance"}', "action"),
        ('{"action": "open", "task_id": "swe/calc-add"}', "action"),
        ('{"action": "fork", "from_episode": "ep-1", "turn": 1}', "action"),
        ('{"action": "write", "path": "a.py"}', "one of text and base64 must be set"),
        ('{"action": "read"}', "path"),
        ("[1, 2, 3]", "no JSON object"),
        ("", "no JSON object"),
    ],
)
def test_what_is_not_an_action_is_a_bad_action_saying_why(reply: str, words: str) -> None:
    bad = parse_action(reply)
    assert isinstance(bad, BadAction), bad
    assert words in bad.problem, bad.problem
    assert bad.text().startswith("invalid action: ")
    assert ACTION_HELP in bad.text()


@pytest.mark.parametrize("depth", [10, 1000, 100_000])
def test_deeply_nested_json_is_a_bad_action(depth: int) -> None:
    nested = '{"action": "read", "path": ' + "[" * depth + "]" * depth + "}"
    assert isinstance(parse_action(nested), BadAction)
    objects = '{"a": ' * depth + "1" + "}" * depth
    assert isinstance(parse_action(objects), BadAction)


def test_a_tool_calls_arguments_are_checked_as_the_same_object() -> None:
    assert isinstance(parse_action({"action": "read", "path": "calc/ops.py"}), ReadAction)
    assert isinstance(parse_action({"action": "exec"}), BadAction)
    assert isinstance(parse_action({1: "x"}), BadAction)  # type: ignore[dict-item]
    looped: dict[str, Any] = {"action": "write", "path": "a"}
    looped["text"] = looped
    assert isinstance(parse_action(looped), BadAction)


@settings(max_examples=300, deadline=None)
@given(st.text() | st.text(alphabet='{}[]":,\\ actionreadpthxsubmi`\n0123456789'))
def test_arbitrary_text_is_an_action_or_a_bad_action(reply: str) -> None:
    parsed = parse_action(reply)
    assert isinstance(parsed, BadAction | ExecAction | WriteAction | ReadAction | SubmitAction)
    if isinstance(parsed, BadAction):
        assert parsed.problem
        assert parsed.text()


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    )
)
def test_arbitrary_json_like_arguments_are_an_action_or_a_bad_action(value: object) -> None:
    parsed = parse_action(value if isinstance(value, dict) else {"action": value})
    assert isinstance(parsed, BadAction | ExecAction | WriteAction | ReadAction | SubmitAction)


def test_an_observation_reads_as_status_output_and_end() -> None:
    obs = ObservationEvent.build(episode_id="ep-1", turn=2, action="exec", status=SandboxStatus.NONZERO_EXIT,
                                 exit_code=1, stdout="1 failed", stderr="boom")  # fmt: skip
    text = render_observation(obs)
    assert text.splitlines()[0] == "turn 2 exec: nonzero_exit (exit code 1)"
    assert "stdout:\n1 failed" in text
    assert "stderr:\nboom" in text
    read = ObservationEvent.build(
        episode_id="ep-1", turn=3, action="read", status=SandboxStatus.OK, content="def add(): ..."
    )
    assert render_observation(read).endswith("def add(): ...")
    rejected = ObservationEvent.build(episode_id="ep-1", turn=4, action="read", status="rejected", reason="no file")
    assert "reason: no file" in render_observation(rejected)


class _NoEpisodes:
    """An EpisodeClient stand-in that fails the test if anything is sent."""

    def open(self, *_a: object, **_k: object) -> None:
        raise AssertionError("nothing may be sent")


def test_the_gym_env_answers_a_bad_reply_without_a_step() -> None:
    env = EpisodeEnv(_NoEpisodes(), "swe/calc-add")  # type: ignore[arg-type]
    with pytest.raises(EpisodeError, match="reset"):
        env.step('{"action": "submit"}')
    env.episode = SimpleNamespace(episode_id="ep-1")  # type: ignore[assignment]  # must not be acted on
    obs, reward, done, info = env.step("```json\n{oops}\n```")
    assert (reward, done) == (0.0, False)
    assert obs.startswith("invalid action: not valid JSON")
    assert "invalid_action" in info
    out = SkyRLEpisodeEnv(env).step("no action here")
    assert (out["reward"], out["done"]) == (0.0, False)
    assert out["observations"][0]["content"].startswith("invalid action: no JSON object")


def test_the_verl_tool_answers_a_bad_call_and_an_unknown_instance() -> None:
    tool = VerlEpisodeTool({"run_id": "r"}, client=_NoEpisodes())  # type: ignore[arg-type]
    assert tool.get_openai_tool_schema()["function"]["name"] == tool.name == "workspace"
    tool._episodes["i-1"] = SimpleNamespace(episode_id="ep-1")  # type: ignore[assignment]

    async def calls() -> None:
        response, reward, metrics = await tool.execute("i-1", {"action": "exec"})
        assert response.text.startswith("invalid action: ")
        assert (reward, "invalid_action" in metrics) == (0.0, True)
        response, reward, _ = await tool.execute("nope", {"action": "submit"})
        assert "no open episode" in response.text
        assert await tool.calc_reward("i-1") == 0.0
        await tool.release("i-1")
        with pytest.raises(EpisodeError, match="task_id"):
            await tool.create(None, create_kwargs={})

    asyncio.run(calls())

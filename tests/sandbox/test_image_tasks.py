"""Image tasks (the Harbor format) on the real docker daemon: `tasks load DIR` builds and validates, the
verifier runs in a fresh container that holds only the agent's WORKDIR, and its reward file decides.

Every task image a test builds is removed after the module; the base images stay (a cache).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from schemas.errors import SandboxError
from tests.sandbox.image_task import CreatedContainers, hello, tar_of, verifier_of
from tests.unit.workers.tasks.harbor.test_directory import TEST_SH, make_task
from workers.images.task_images import TaskImageError
from workers.tasks.harbor.directory import read_task_dir
from workers.tasks.registry import TaskRegistry


def test_a_task_with_a_working_oracle_is_valid(validating: Any, image_of: Any, tmp_path: Path) -> None:
    task = hello(tmp_path)
    result = validating(image_of(task), task)
    assert result.as_json() == {"task_id": task.task_id, "oracle_reward": 1.0, "noop_reward": 0.0, "valid": True,
                                "reasons": []}  # fmt: skip


def test_a_broken_oracle_and_a_free_reward_are_invalid(validating: Any, image_of: Any, tmp_path: Path) -> None:
    broken = hello(tmp_path, {"solution/solve.sh": "#!/bin/bash\necho 'print(\"nope\")' > /app/hello.py\n"})
    result = validating(image_of(broken), broken)
    assert (result.valid, result.oracle_reward, result.noop_reward) == (False, 0.0, 0.0)
    assert "the oracle earns 0.0" in result.problems[0]
    free = hello(tmp_path, {"tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"})
    result = validating(image_of(free), free)
    assert (result.valid, result.noop_reward) == (False, 1.0)
    assert "no-op must earn 0.0" in result.problems[0]


def test_a_task_whose_tests_run_agent_code_as_root_is_flagged(validating: Any, image_of: Any, tmp_path: Path) -> None:
    as_root = TEST_SH.replace("rs-as-agent ", "")
    task = hello(tmp_path, {"tests/test.sh": as_root})
    result = validating(image_of(task), task)
    assert (result.valid, result.oracle_reward, result.noop_reward) == (True, 1.0, 0.0)
    assert len(result.flags) == 1
    assert "run the agent's code through rs-as-agent" in result.flags[0]
    assert result.as_json()["reasons"] == result.flags


#: A test.sh that checks things one by one: the first that fails writes 0 and says which.
CHECKS = '#!/bin/bash\nfail() { echo "$1"; echo 0 > /logs/verifier/reward.txt; exit 0; }\n'


def test_rs_as_agent_keeps_agent_code_from_the_reward_and_the_tests(
    verifying: Any, docker_client: Any, image_of: Any, tmp_path: Path
) -> None:
    test_sh = CHECKS + (
        "rs-as-agent sh -c 'echo {\\\"reward\\\": 1} > /logs/verifier/reward.json' && fail 'agent wrote the reward'\n"
        "rs-as-agent cat /tests/test.sh > /dev/null 2>&1 && fail 'agent read the tests'\n"
        "rs-as-agent touch /app/made-by-agent || fail 'agent cannot write its WORKDIR'\n"
        "[ \"$(rs-as-agent id -u)\" = 65534 ] || fail 'agent is not nobody'\n"
        "echo 1 > /logs/verifier/reward.txt\n"
    )
    task = hello(tmp_path, {"tests/test.sh": test_sh})
    assert task.environment is not None
    got = verifying(image_of(task), task.environment, verifier_of(task), None)
    assert (got.reward.reward, got.reward.source) == (1.0, "reward.txt"), got.output


def test_the_verifier_sees_the_agents_workdir_and_nothing_else(
    verifying: Any, docker_client: Any, image_of: Any, tmp_path: Path
) -> None:
    test_sh = CHECKS + (
        '[ "$PWD" = /app ] || fail cwd\n'
        "[ -e /app/hello.py ] && fail 'a file the agent deleted came back'\n"
        "[ \"$(cat /app/new.txt)\" = written ] || fail 'the agent file is missing'\n"
        "[ -L /app/passwd ] && [ \"$(readlink /app/passwd)\" = /etc/passwd ] || fail 'a link is not a link'\n"
        "[ \"$(grep -c : /proc/net/dev)\" = 1 ] || fail 'a network besides loopback'\n"
        "[ \"$(id -u)\" = 0 ] || fail 'not root'\n"
        "echo 1 > /logs/verifier/reward.txt\n"
    )
    task = hello(tmp_path, {"tests/test.sh": test_sh})
    assert task.environment is not None
    workdir = tar_of({"new.txt": "written", "passwd": ("link", "/etc/passwd")})
    got = verifying(image_of(task), task.environment, verifier_of(task), workdir)
    assert (got.reward.reward, got.reward.source, got.timed_out) == (1.0, "reward.txt", False), got


def test_reward_json_wins_and_values_are_clamped(
    verifying: Any, docker_client: Any, image_of: Any, tmp_path: Path
) -> None:
    test_sh = (
        "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
        'echo \'{"reward": 4, "tests": 2}\' > /logs/verifier/reward.json\n'
    )
    task = hello(tmp_path, {"tests/test.sh": test_sh})
    assert task.environment is not None
    got = verifying(image_of(task), task.environment, verifier_of(task), None)
    assert (got.reward.reward, got.reward.source) == (1.0, "reward.json")
    assert got.reward.reason is not None
    assert "clamped" in got.reward.reason
    assert dict(got.reward.values) == {"reward": 4.0, "tests": 2.0}
    # the evidence: the file the reward came from as written, and the image the container ran (by its id)
    assert got.reward_file == '{"reward": 4, "tests": 2}\n'
    assert got.image_id == docker_client.images.get(image_of(task)).id


def test_no_reward_file_and_a_timeout_are_zeros_with_reasons(
    verifying: Any, docker_client: Any, image_of: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = CreatedContainers(monkeypatch)
    silent = hello(tmp_path, {"tests/test.sh": "#!/bin/bash\necho ran but wrote nothing\n"})
    assert silent.environment is not None
    got = verifying(image_of(silent), silent.environment, verifier_of(silent), None)
    assert (got.reward.reward, got.reward.source) == (0.0, None)
    assert "neither reward.json nor reward.txt" in (got.reward.reason or "")
    assert "ran but wrote nothing" in got.output
    assert got.reward_file is None
    slow = hello(tmp_path, {"tests/test.sh": "#!/bin/bash\nsleep 600\necho 1 > /logs/verifier/reward.txt\n"})
    assert slow.environment is not None
    verifier = verifier_of(slow).model_copy(update={"timeout_s": 2.0})
    got = verifying(image_of(slow), slow.environment, verifier, None)
    assert (got.reward.reward, got.timed_out) == (0.0, True)
    assert got.seconds < 60
    assert created.ids or got.backend == "process"  # an overlay makes a container only to unpack a new image
    assert created.left(docker_client) == []


def test_a_missing_image_is_the_hosts_error_never_a_zero(verifying: Any, tmp_path: Path) -> None:
    task = hello(tmp_path)
    assert task.environment is not None
    with pytest.raises(SandboxError, match="rs-task/absent:1"):
        verifying("rs-task/absent:1", task.environment, verifier_of(task), None)


@pytest.mark.parametrize("backend", ["process", "docker"])
def test_cli_load_validate_stores_nothing_when_a_task_is_invalid(
    backend: str, tmp_path: Path, image_of: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from rewardstream.cli.main import _register, app

    _register()
    if backend == "process":
        monkeypatch.delenv("RS_SANDBOX_BACKEND", raising=False)  # the default
    else:
        monkeypatch.setenv("RS_SANDBOX_BACKEND", backend)
    good = make_task(tmp_path / "tasks", "good")
    bad = make_task(tmp_path / "tasks", "bad")
    for task_dir in (good, bad):  # this process's image, removed after the module
        (task_dir / "environment" / "owner").write_text(f"{os.getpid()}\n")
    image_of(read_task_dir(good).task)
    (bad / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    runner = CliRunner()
    refused = runner.invoke(
        app, ["tasks", "load", str(tmp_path / "tasks"), "--dir", str(tmp_path / "reg"), "--validate"]
    )
    assert refused.exit_code != 0
    assert "bad: invalid: the oracle earns 0.0" in refused.output
    assert TaskRegistry(tmp_path / "reg").ids() == []
    (bad / "solution" / "solve.sh").write_text("#!/bin/bash\necho 'print(\"hello\")' > /app/hello.py\n")
    stored = runner.invoke(
        app, ["tasks", "load", str(tmp_path / "tasks"), "--dir", str(tmp_path / "reg"), "--validate"]
    )
    assert stored.exit_code == 0, stored.output
    assert TaskRegistry(tmp_path / "reg").ids() == ["bad", "good"]
    checked = runner.invoke(app, ["tasks", "validate", "good", "bad", "--dir", str(tmp_path / "reg"), "--json"])
    assert checked.exit_code == 0, checked.output
    assert [line for line in checked.output.splitlines() if line.startswith("{")] == [
        f'{{"task_id":"{name}","oracle_reward":1.0,"noop_reward":0.0,"valid":true,"reasons":[]}}'
        for name in ("good", "bad")
    ]
    said = runner.invoke(app, ["tasks", "validate", "good", "--dir", str(tmp_path / "reg")])
    assert f"good: valid (oracle 1.0, no-op 0.0, on {backend})" in said.output, said.output


def test_cli_lists_the_local_bases_present(docker_client: Any, image_of: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rewardstream.cli.main import _register, app

    _register()
    image_of(hello(tmp_path))  # its base is built if it was not
    listed = CliRunner().invoke(app, ["sandbox", "bases"])
    assert listed.exit_code == 0, listed.output
    rows = {row["image"]: row for row in orjson.loads(listed.output)["bases"]}
    assert set(rows) == {"debian:bookworm-slim", "python:3.11-slim"}
    assert rows["python:3.11-slim"]["id"] == docker_client.images.get("python:3.11-slim").id


_GIT = "git -c user.email=author@example.com -c user.name=author"
HISTORY = (
    "FROM debian:bookworm-slim\n"
    "RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*\n"
    "WORKDIR /app\n"
    f"RUN git init -q -b main . && {_GIT} commit -q --allow-empty -m base && echo buggy > code.txt "
    f"&& git add code.txt && {_GIT} commit -q -m buggy && git checkout -q -b fix && echo fixed > code.txt "
    f"&& {_GIT} commit -qam 'the fix' && git tag v-fix && git checkout -q main && echo wip > wip.txt "
    f"&& git add wip.txt && {_GIT} stash -q && git branch other fix && git reflog | head -3\n"
)
#: Every commit message and blob text left in /app's repository, and its refs.
AUDIT = (
    "cd /app && git for-each-ref --format='ref %(refname)' && "
    "git cat-file --batch-all-objects --batch-check='%(objecttype) %(objectname)' | while read -r t o; do "
    'case $t in commit) echo "commit $(git log -1 --format=%s $o)";; blob) echo "blob $(git cat-file -p $o)";; esac; '
    "done"
)


def test_repositories_in_the_workdir_keep_only_heads_history(
    docker_client: Any, image_of: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = hello(tmp_path, {"environment/Dockerfile": HISTORY})
    image = image_of(task)
    warned = capsys.readouterr().err
    for ref in ("refs/heads/fix", "refs/heads/other", "refs/tags/v-fix", "refs/stash"):
        assert f"/app: {ref}" in warned, warned
    left = docker_client.containers.run(image, ["sh", "-c", AUDIT], network_mode="none", remove=True).decode()
    assert sorted(left.split("\n")) == sorted(["", "ref refs/heads/main", "commit base", "commit buggy", "blob buggy"])


def test_a_repository_in_an_image_without_git_is_refused(image_of: Any, tmp_path: Path) -> None:
    dockerfile = "FROM debian:bookworm-slim\nWORKDIR /app\nRUN mkdir -p /app/.git\n"
    task = hello(tmp_path, {"environment/Dockerfile": dockerfile})
    with pytest.raises(TaskImageError, match="is a git repository and the image has no git"):
        image_of(task)


def test_a_reward_directory_made_a_link_is_not_followed_out_of_the_sandbox(
    verifying: Any, image_of: Any, tmp_path: Path
) -> None:
    """test.sh (root) replaces /logs/verifier by a link to a host directory holding a reward of 1: never read."""
    host_dir = tmp_path / "host-rewards"
    host_dir.mkdir()
    (host_dir / "reward.txt").write_text("1\n")
    task = hello(
        tmp_path, {"tests/test.sh": f"#!/bin/bash\nrm -rf /logs/verifier && ln -s {host_dir} /logs/verifier\n"}
    )
    assert task.environment is not None
    got = verifying(image_of(task), task.environment, verifier_of(task), None)
    assert (got.reward.reward, got.reward.source) == (0.0, None), got

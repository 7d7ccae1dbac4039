"""`rewardstream up --only kafka --pipeline` with `RS_KAFKA_AUTH=scram`: the whole pipeline of one machine, each
process as its own principal under the repo's ACL table, on a broker of its own (cache dir of its own, ports
19792-19793; the shared OpenSearch, S3 and sandbox rootfs as clients).

A trainer principal's generations get their rewards (executor, verifier, judge, reward processor), an agent
episode its observations and reward (episode worker), a `/run_code` call its answer (gateway, executor); the
indexer and the auditor run beside them. No process logs a refusal (the table gives every role what it does),
each runs with its own principal's credentials in its environment and none on a command line, and no password
appears in any file the run wrote (logs, pid files, outputs) nor in what the commands and the test printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from infra.local.process import group_members
from schemas.settings import Settings
from streams.sdk import TrainerClient, TrainerConfig
from tests.integration.platform_env import shared_cache
from tests.integration.sdk_env import Problems, convert_problems

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

PORT = 19792
#: Each pipeline process and the principal it must run as (``schemas.kafka_acls``).
PRINCIPAL_OF = {"executor": "executor", "verifier": "verifier", "judge": "judge", "indexer": "indexer",
                "reward": "rewards", "episode": "episode", "auditor": "auditor", "gateway": "gateway"}  # fmt: skip
#: What a process's log says when Kafka refused it (``bus.access``'s lines, librdkafka's codes).
REFUSALS = ("may not ", "refused the credentials", "AUTHORIZATION_FAILED", "Authorization failed")
EPISODE_TASK = "swe/calc-call"
PUBLIC_TESTS = "python3 -m unittest -q tests.test_ops"


@dataclass
class Secured:
    """The running platform: its environment, cache dir, and what ``up`` printed."""

    env: dict[str, str]
    cache: Path
    said: str
    #: The trainer's one-shot run and how many generations it rewarded (what the operator replays).
    run: tuple[str, int] | None = None

    def cli(self, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rewardstream", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout, check=False)  # fmt: skip

    def passwords(self) -> list[str]:
        kept: dict[str, str] = json.loads((self.cache / "kafka-auth" / "credentials.json").read_text())
        return list(kept.values())

    def settings(self, principal: str, **changes: Any) -> Settings:
        """The settings a client of ``principal`` runs with: its env file, as an operator would source it."""
        path = self.cache / "kafka-auth" / "clients" / f"{principal}.env"
        env = dict(line.split("=", 1) for line in path.read_text().splitlines())
        return Settings(kafka_bootstrap=f"127.0.0.1:{PORT}", kafka_security_protocol=env["RS_KAFKA_SECURITY_PROTOCOL"],
                        kafka_sasl_mechanism=env["RS_KAFKA_SASL_MECHANISM"],
                        kafka_sasl_username=env["RS_KAFKA_SASL_USERNAME"],
                        kafka_sasl_password=env["RS_KAFKA_SASL_PASSWORD"],
                        kafka_ssl_ca_location=env["RS_KAFKA_SSL_CA_LOCATION"], **changes)  # fmt: skip


def _free_port_run(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports (below the ephemeral range)."""
    for base in range(21000, 32000, 10):
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + count):
                    stack.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise AssertionError("no free port range")


@pytest.fixture(scope="module")
def problems(tmp_path_factory: pytest.TempPathFactory) -> Problems:
    """Three HumanEval problems and the agent-episode task, in one registry."""
    from tests.sandbox.swe_task import task
    from workers.tasks.registry import TaskRegistry

    converted = convert_problems(tmp_path_factory.mktemp("registry"), 3)
    TaskRegistry(converted.registry_dir).store([task("call", EPISODE_TASK)])
    return converted


@pytest.fixture(scope="module")
def secured(
    problems: Problems, tmp_path_factory: pytest.TempPathFactory, minio_client: Any, opensearch_client: Any
) -> Iterator[Secured]:
    """Kafka with auth and the pipeline on it, started by ``up --only kafka --pipeline``; stopped by ``down``
    (this cache dir's processes only), the bucket removed."""
    from tests.integration.test_indexer import drop_indices
    from workers.artifacts import remove_bucket

    tmp = tmp_path_factory.mktemp("acl-pipeline")
    cache = shared_cache(tmp)
    name = f"t-acl-{uuid.uuid4().hex[:10]}"
    ports = _free_port_run(10)  # seven workers' /metrics, the gateway, Prometheus, Alertmanager
    minio_client.make_bucket(name)
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("RS_KAFKA_")},
        "RS_CACHE_DIR": str(cache),
        "RS_KAFKA_BOOTSTRAP": f"127.0.0.1:{PORT}",
        "RS_KAFKA_AUTH": "scram",
        "RS_TASKS_DIR": str(problems.registry_dir),
        "RS_S3_BUCKET": name,
        "RS_OPENSEARCH_INDEX_PREFIX": name,
        "RS_OPENSEARCH_REPLICAS": "0",
        "RS_METRICS_PORT": str(ports),
        "RS_GATEWAY_PORT": str(ports + 7),
        "RS_PROMETHEUS_URL": f"http://127.0.0.1:{ports + 8}",
        "RS_ALERTMANAGER_URL": f"http://127.0.0.1:{ports + 9}",
    }
    platform = Secured(env, cache, "")
    try:
        up = platform.cli("up", "--only", "kafka", "--pipeline", "--concurrency", "1")
        platform.said = up.stdout + up.stderr
        assert up.returncode == 0, platform.said
        yield platform
    finally:
        down = platform.cli("down")
        platform.said += down.stdout + down.stderr
        remove_bucket(minio_client, name)
        drop_indices(opensearch_client, name)


def _processes(cache: Path) -> dict[str, int]:
    """Each pipeline process's supervisor pid (its process group), from its pid file."""
    return {name: int((cache / "run" / f"{name}.pid").read_text().split()[0]) for name in PRINCIPAL_OF}


def _environ(pid: int) -> dict[str, str]:
    """``pid``'s environment (empty if it is gone or not ours to read)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(entry.split("=", 1) for entry in raw.decode(errors="replace").split("\0") if "=" in entry)


def test_each_process_runs_as_its_own_principal_with_no_password_on_its_command_line(secured: Secured) -> None:
    """The supervisor and the ``rewardstream`` process it runs have their principal's credentials in their
    environment, nobody else's; no password is on any command line of the process group."""
    kept: dict[str, str] = json.loads((secured.cache / "kafka-auth" / "credentials.json").read_text())
    for name, pgid in _processes(secured.cache).items():
        principal = PRINCIPAL_OF[name]
        members = group_members(pgid)
        with_credentials = 0
        for member in members:
            environ = _environ(member)
            if "RS_KAFKA_SASL_USERNAME" in environ:
                with_credentials += 1
                assert environ["RS_KAFKA_SASL_USERNAME"] == principal, (name, member)
                assert environ["RS_KAFKA_SASL_PASSWORD"] == kept[principal], (name, member)
                assert environ["RS_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
            with contextlib.suppress(OSError):
                command_line = Path(f"/proc/{member}/cmdline").read_bytes().decode(errors="replace")
                assert not any(password in command_line for password in kept.values()), (name, member)
        assert with_credentials >= 2, (name, members)  # the supervisor and its rewardstream process


@pytest.mark.timeout(400)
def test_the_trainers_generations_get_their_rewards_through_every_role(
    secured: Secured, problems: Problems, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    trainer = secured.settings("trainer", tasks_dir=problems.registry_dir)
    config = TrainerConfig.from_settings(trainer, f"acl-{uuid.uuid4().hex[:8]}")
    expected: dict[str, float] = {}
    with TrainerClient(config) as client:
        for n, task_id in enumerate(sorted(problems.canonical)):
            for good, code in ((True, problems.canonical[task_id]), (False, problems.wrong[task_id])):
                generation_id = f"acl-{n}-{good}-{uuid.uuid4().hex[:6]}"
                client.send(client.generation(task_id, code, generation_id=generation_id))
                expected[generation_id] = 1.0 if good else 0.0
        client.flush(30)
        got = {r.generation_id: r.reward for r in client.rewards(timeout_s=300, limit=len(expected))}
    assert got == expected, _logs(secured.cache)
    secured.run = (config.run_id, len(expected))
    _no_password_in(capfd, caplog, secured)


@pytest.mark.timeout(400)
def test_an_agent_episode_and_a_run_code_call_are_answered(
    secured: Secured, problems: Problems, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    import sandbox_fusion

    from streams.sdk.episodes import EpisodeClient, EpisodeConfig
    from tests.integration.gateway_run_code_env import run
    from tests.sandbox.swe_task import OPS_FIXED

    trainer = secured.settings("trainer", tasks_dir=problems.registry_dir)
    run_id = f"acl-ep-{uuid.uuid4().hex[:8]}"
    with TrainerClient(TrainerConfig.from_settings(trainer, run_id)) as client:
        config = EpisodeConfig.from_settings(trainer, run_id, answer_timeout_s=120)
        with EpisodeClient(config, client) as episodes:
            episode = episodes.open(EPISODE_TASK)
            assert episode.opened is not None
            assert episode.opened.status == "ok", episode.opened
            assert episode.exec(PUBLIC_TESTS).status == "nonzero_exit"
            assert episode.write("calc/ops.py", OPS_FIXED).status == "ok"
            assert episode.exec(PUBLIC_TESTS).status == "ok"
        with EpisodeClient(config, client) as restarted:  # reads the actions it sent back (trainer's ACL)
            reward = restarted.resume(episode.episode_id).submit(timeout_s=240)
    assert (reward.generation_id, reward.reward) == (episode.episode_id, 1.0), _logs(secured.cache)
    answer = run(f"http://127.0.0.1:{secured.env['RS_GATEWAY_PORT']}", code="print(6 * 7)", language="python")
    assert answer.status == sandbox_fusion.RunStatus.Success, answer
    assert answer.run_result is not None
    assert answer.run_result.stdout == "42\n", answer
    _no_password_in(capfd, caplog, secured)


@pytest.mark.timeout(600)
def test_the_operator_replays_the_run_in_its_own_namespace(secured: Secured) -> None:
    """``rewardstream replay`` as User:operator: it reads the live topics, makes the replay namespace, runs its
    pipeline (as the operator: no role principal has rights there), diffs and deletes the namespace."""
    import orjson

    assert secured.run is not None, "the trainer's run did not complete"
    run_id, count = secured.run
    path = secured.cache / "kafka-auth" / "clients" / "operator.env"
    operator = dict(line.split("=", 1) for line in path.read_text().splitlines())
    done = subprocess.run([sys.executable, "-m", "rewardstream", "replay", "--run-id", run_id, "--json",
                           "--replay-id", "acl", "--timeout", "300"], env={**secured.env, **operator},
                          capture_output=True, text=True, timeout=560, check=False)  # fmt: skip
    secured.said += done.stdout + done.stderr
    assert done.returncode == 0, done.stderr[-4000:]
    result = orjson.loads(done.stdout)
    assert result["replayed"] == count
    assert result["counts"]["same"] == count, result["counts"]


def test_no_process_was_refused_anything(secured: Secured) -> None:
    """Every role did its work (tests above) and its start-up (the auditor and indexer consuming, the episode
    worker making its topics) with only its table rows: no log of any process says Kafka refused it."""
    for name in PRINCIPAL_OF:
        text = (secured.cache / "logs" / f"{name}.log").read_text(errors="replace")
        said = [line for line in text.splitlines() if any(refusal in line for refusal in REFUSALS)]
        assert not said, f"{name}: {said[:5]}"


def test_no_password_is_in_any_file_or_output(
    secured: Secured, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Runs last in the module: every log, pid file and output of the run, the commands' and the test's own
    output, scanned for every principal's password; only the credentials' own files (0600) and the brokers'
    server.properties (0600, the super user's) hold one."""
    passwords = secured.passwords()
    status = secured.cli("status", "--json")
    out, err = capfd.readouterr()
    printed = secured.said + status.stdout + status.stderr + out + err + caplog.text
    assert not [p for p in passwords if p in printed]
    keepers = {secured.cache / "kafka-auth"}
    leaked = [path for path in _files(secured.cache, keepers) if _holds(path, passwords)]
    assert not [path for path in leaked if path.name != "server.properties"], leaked
    assert [path.name for path in leaked] == ["server.properties"]  # the scan does find what is there


def _no_password_in(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, secured: Secured) -> None:
    """Nothing this test printed or logged (the SDK's clients among it) holds a password."""
    out, err = capfd.readouterr()
    shown = out + err + caplog.text
    assert not [password for password in secured.passwords() if password in shown]


def _files(root: Path, skip: set[Path]) -> Iterator[Path]:
    """Every regular file under ``root``, without following links (the shared downloads) nor entering ``skip``."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if Path(folder, d) not in skip and not Path(folder, d).is_symlink()]
        yield from (Path(folder, f) for f in files if not Path(folder, f).is_symlink())


def _holds(path: Path, passwords: list[str]) -> bool:
    data = path.read_bytes()
    return any(password.encode() in data for password in passwords)


def _logs(cache: Path) -> str:
    """The end of each pipeline process's log (what an assertion message shows)."""
    tails = []
    for name in PRINCIPAL_OF:
        lines = (cache / "logs" / f"{name}.log").read_text(errors="replace").splitlines()
        tails.append(f"--- {name}\n" + "\n".join(lines[-20:]))
    return "\n".join(tails)

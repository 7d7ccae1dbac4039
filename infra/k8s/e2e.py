"""``python -m infra.k8s.e2e`` (``make k8s-e2e``): the chart on a real local Kubernetes, end to end (issue 27).

Builds or reuses the cluster binaries and the image, starts etcd, the control plane, a kubelet on a private
containerd and KEDA, imports the image, installs the chart (host networking: every byte on loopback) against the
local Kafka, S3 and OpenSearch under a topic prefix of its own, publishes a burst of generations and agent
episodes through the CLI, kills an executor pod with work in flight once KEDA has scaled it up, and checks: every
reward right and exactly once (the rewards topic read back whole), KEDA scaled the executor up under lag and back
down once drained, every process stopped by pid and the host as it was. Prints one JSON line last; exit 0 iff
every check passed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from infra.helm.sources import ensure_helm
from infra.image.build import REPOSITORY, project_version
from infra.k8s import e2e_mounts as mounts
from infra.k8s import e2e_steps as steps
from infra.k8s import e2e_workload as workload
from infra.k8s.__main__ import default_paths
from infra.k8s.build import ensure_binaries
from infra.k8s.cluster import LocalCluster
from infra.k8s.e2e_chart import NAMESPACE, Install, install_chart, reward_app_id, uninstall_chart
from infra.k8s.e2e_kafka import (
    PREFIX_ROOT,
    RUN_ROOT,
    Namespace,
    close_namespace,
    group_lag,
    open_namespace,
    read_rewards,
    sweep_leftovers,
)
from infra.k8s.e2e_trainer import (
    TrainerEnv,
    episode_id,
    load_tasks,
    start_episode,
    start_submit,
    stopped_at_exit,
    tail,
)
from infra.k8s.e2e_verdict import Outcome, tally
from infra.k8s.e2e_watch import ReplicaWatch, kill_pod, pod_to_kill
from infra.k8s.images import import_docker_image
from infra.k8s.layout import K8sPaths
from infra.k8s.teardown import exit_on_sigterm, shim_pids
from schemas.errors import RewardstreamError
from schemas.settings import Settings

PARTITIONS = 6
"""The e2e values' ``kafka.partitions``: the executor's maxReplicas (4) stays below it."""
EXECUTOR_MIN = 1


def _log(line: str) -> None:
    print(line, flush=True)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m infra.k8s.e2e", description=__doc__)
    parser.add_argument("--tasks", type=int, default=12, help="synthetic call tasks")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of right/wrong/slow solutions per task")
    parser.add_argument("--slow-s", type=float, default=1.0, help="how long a slow right solution sleeps")
    parser.add_argument("--episodes", type=int, default=4, help="agent episodes played beside the burst")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for every reward to arrive")
    parser.add_argument("--families", default="python", help="toolchain families of the image if it is built")
    parser.add_argument("--build-image", action="store_true", help="rebuild the image even if docker has it")
    parser.add_argument("--jobs", type=int, default=1, help="parallel compiles if the cluster binaries are built")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    exit_on_sigterm()
    start = time.monotonic()
    outcome = Outcome()
    try:
        paths = default_paths()
        ensure_binaries(paths, keda=True, jobs=args.jobs, report=_log)
        ref = f"{REPOSITORY}:{project_version(steps.ROOT)}"
        steps.ensure_image(ref, args.families, args.build_image, _log)
        ensure_helm()
        _on_cluster(paths, ref, args, outcome)
    except (RewardstreamError, OSError, subprocess.SubprocessError) as exc:
        outcome.errors.append(f"{type(exc).__name__}: {exc}")
    outcome.seconds = time.monotonic() - start
    for line in outcome.failures() if not outcome.passed else []:
        print(f"e2e: FAILED: {line}", file=sys.stderr)
    print(json.dumps(outcome.line()), flush=True)
    return 0 if outcome.passed else 1


def _on_cluster(paths: K8sPaths, ref: str, args: argparse.Namespace, outcome: Outcome) -> None:
    """Up, the run, then always down (by pid; the host restored), recording whether both held."""
    cluster = LocalCluster(paths)
    cluster.up(keda=True, report=_log)
    pids = cluster.running()
    try:
        import_docker_image(paths, ref)
        _log(f"e2e: imported {ref} into the node")
        _run(cluster, paths, ref, args, outcome)
    except RewardstreamError as exc:
        outcome.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        socket = paths.containerd_socket
        try:
            cluster.down(report=_log)
            outcome.host_restored = True
        except RewardstreamError as exc:
            outcome.errors.append(f"down: {exc}")
        left = [f"{n} (pid {p})" for n, p in pids.items() if Path(f"/proc/{p}").exists() and not _zombie(p)]
        outcome.stopped = not cluster.running() and not left and not shim_pids(socket)
        if left:
            outcome.errors.append(f"still running after down: {', '.join(left)}")


@dataclass(frozen=True, slots=True)
class _Run:
    cluster: LocalCluster
    paths: K8sPaths
    ref: str
    args: argparse.Namespace
    outcome: Outcome
    settings: Settings


def _run(cluster: LocalCluster, paths: K8sPaths, ref: str, args: argparse.Namespace, outcome: Outcome) -> None:
    settings = Settings()
    tag = uuid.uuid4().hex[:8]
    run_id = f"{RUN_ROOT}{tag}"
    config = settings.kafka_client_config()
    swept = sweep_leftovers(config, reward_app_id())
    if swept:
        _log(f"e2e: deleted {len(swept)} topics and groups an earlier run left: {', '.join(swept[:6])}")
    ns = open_namespace(config, f"{PREFIX_ROOT}{tag}.", PARTITIONS, run_id, reward_app_id())
    try:
        _burst(_Run(cluster, paths, ref, args, outcome, settings), ns)
    finally:
        try:
            uninstall_chart(paths.admin_kubeconfig)
        except RewardstreamError as exc:
            _log(f"e2e: helm uninstall: {exc} (down deletes what is left)")
        _log(f"e2e: deleted {len(close_namespace(ns))} topics and groups of the run")


def _burst(run: _Run, ns: Namespace) -> None:
    paths, args, outcome, settings = run.paths, run.args, run.outcome, run.settings
    scratch = paths.root / "e2e-run"  # outside the cluster dir: its logs outlive ``down``
    shutil.rmtree(scratch, ignore_errors=True)
    trainer = TrainerEnv(ns.prefix, PARTITIONS, scratch / "tasks", scratch, ns.run_id)
    load_tasks(trainer, workload.tasks(args.tasks))
    install = Install(
        topic_prefix=ns.prefix, partitions=PARTITIONS, tasks_dir=trainer.tasks_dir, slots_dir=paths.cluster / "slots",
        s3_access_key=settings.s3.access_key, s3_secret_key=settings.s3.secret_key.get_secret_value(),
        image_tag=run.ref.split(":", 1)[1],
    )  # fmt: skip
    install.slots_dir.mkdir(parents=True, exist_ok=True)
    kubectl = run.cluster.kubectl
    install_chart(paths.admin_kubeconfig, install)
    _log(f"e2e: chart installed; every role available in {steps.wait_installed(kubectl, NAMESPACE, 600):.1f}s")
    sights = mounts.seen(kubectl, NAMESPACE)
    outcome.errors.extend(mounts.problems(sights))
    hidden = sorted(role for role, sight in sights.items() if sight.hidden)
    _log(f"e2e: of {len(sights)} roles' pods, these see the tasks' hidden part: {hidden}")
    solutions = workload.solutions(ns.run_id, args.tasks, args.rounds, args.slow_s)
    episodes = workload.episodes(args.episodes)
    with ReplicaWatch(kubectl, NAMESPACE) as watch, stopped_at_exit([]) as procs:
        burst_start = time.monotonic()
        submit = start_submit(trainer, solutions, args.timeout)
        procs.append(submit)
        players = [start_episode(trainer, e, args.timeout) for e in episodes]
        procs.extend(players)
        _log(f"e2e: publishing {len(solutions)} generations and {len(episodes)} episodes")
        lag = steps.wait_kill_moment(
            watch,
            lambda: group_lag(ns, "executor", "generations"),
            lambda: submit.poll() is None,
            partitions=PARTITIONS,
            published=len(solutions),
            timeout_s=args.timeout,
        )
        victim = pod_to_kill(watch.pods())
        if victim is not None:
            kill_pod(kubectl, NAMESPACE, victim)
            outcome.pod_killed = victim
            _log(
                f"e2e: killed executor pod {victim} at {time.monotonic() - burst_start:.1f}s, "
                f"executor lag {lag} of {len(solutions)}"
            )
        for proc in (submit, *players):
            proc.wait(timeout=args.timeout + 60)
        _log(f"e2e: the publisher and players exited ({submit.returncode}, {[p.returncode for p in players]}) "
             f"after {time.monotonic() - burst_start:.1f}s")  # fmt: skip
        if submit.returncode != 0:
            outcome.errors.append(f"rewardstream submit exited {submit.returncode}: {tail(scratch / 'submit.log')}")
        outcome.max_replicas = watch.most
        down_s = steps.wait_scaled_down(kubectl, watch, NAMESPACE, EXECUTOR_MIN, 300)
        outcome.scaled_down = True
        outcome.max_replicas = watch.most
        _log(f"e2e: executor replicas over time {_changes(watch.samples)}; back to {EXECUTOR_MIN} in {down_s:.1f}s")
    expected = {s.generation_id: s.expected for s in solutions}
    for episode in episodes:
        found = episode_id(trainer, episode)
        if found is None:
            outcome.errors.append(
                f"episode {episode.name} never opened: {tail(scratch / f'episode-{episode.name}.err')}"
            )
        else:
            expected[found] = episode.expected
    outcome.tally = tally(read_rewards(ns), expected)
    _log(f"e2e: {outcome.tally.rewards} rewards read back for {len(expected)} generations and episodes")


def _changes(samples: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """Only the samples where the count changed: (seconds, ready executors)."""
    out: list[tuple[float, int]] = []
    for at, count in samples:
        if not out or out[-1][1] != count:
            out.append((at, count))
    return out


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return True


if __name__ == "__main__":
    sys.exit(main())

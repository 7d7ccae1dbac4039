"""The control plane's ceilings with grading taken out (issue 27): rewards/s of one reward processor, results/s
of one executor worker loop, episode steps/s of one episode worker.

Each part has its own topics and its input published before its process starts, so what is timed is that one
process draining a backlog: from its first output to its last, as a read_committed reader sees them (the
start-up, consumer-group join and ``init_transactions``, is a one-time cost and left out). The reward
processor runs as ``rewardstream reward run``, the whole process a user starts, on real results (made by the
real role handlers with the no-op grader, then copied under fresh ids). The executor and the episode worker
are the product's own loop and handler wired in a process of their own, with the BENCHMARK-ONLY no-op runner
(``benchmarks.noop_runner``) injected in that process: there is no setting that selects it.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.synchronize import Event as ProcessEvent
from typing import Any

from benchmarks.capacity_kafka import TASK_ID, BenchRun, Reader, balanced_keys, bench_run, call_task, generations
from benchmarks.noop_runner import NoopGrader, NoopStepSandbox
from bus.changelog import changelog_name
from bus.clients import make_producer
from bus.metrics import WorkerMetrics
from schemas.codec import decode, encode
from schemas.episodes import ActionEvent
from schemas.events import ExecutionResult, HiddenVerdict, JudgeScore, new_event_id
from schemas.runs import RunRequest
from schemas.settings import Settings
from schemas.tasks import Task
from schemas.topics import catalog_for, topic_for
from workers.handler import Done, Source
from workers.judge.cache import CachedJudge
from workers.judge.rubric import RubricJudge
from workers.logs.shipper import worker_name
from workers.roles.common import RoleContext, TaskSource
from workers.roles.episode_worker import build_episode_worker, clock_topic, state_changelog
from workers.roles.executor import ExecutorHandler
from workers.roles.judging import JudgeHandler
from workers.roles.run_code import ExecutorRouter, RunHandler
from workers.roles.service import Dependencies, artifact_store, loop_clients, worker_config
from workers.roles.verifier import VerifierHandler
from workers.tasks.registry import TaskRegistry
from workers.transactional_loop import TransactionalWorker

#: Long enough for a loaded 2-core machine; a part that takes longer failed.
TIMEOUT_S = 600.0
_SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter: librdkafka's threads never forked


def relay(stop: ProcessEvent) -> threading.Event:
    """A thread event set when the parent sets ``stop`` (what the loop watches is a ``threading.Event``)."""
    halt = threading.Event()

    def wait() -> None:
        stop.wait()
        halt.set()

    threading.Thread(target=wait, daemon=True).start()
    return halt


# ---- the reward processor ---------------------------------------------------------------------------------
def results_of(task: Task, registry: TaskRegistry, n: int, partitions: int) -> dict[str, list[tuple[bytes, bytes]]]:
    """``n`` generations' execution, verdict and judgement, keyed by episode: one of each made by the real
    handlers (no-op grader, built-in rubric judge), then copied under fresh ids (making each one by its handler
    would take longer than the processor takes to join them)."""
    context = RoleContext(role="bench", worker="bench", tasks=TaskSource(registry), artifacts=None, output_topic="x")
    event = generations(1, partitions, "def f():\n    return 1\n", "template")[0]
    source = Source("generations", 0, 0)
    made: list[tuple[str, type[ExecutionResult | HiddenVerdict | JudgeScore], Done]] = []
    for role, model, handler in (
        ("executions", ExecutionResult, ExecutorHandler(context, NoopGrader())),
        ("verdicts", HiddenVerdict, VerifierHandler(context, NoopGrader(), None)),
        ("judgements", JudgeScore, JudgeHandler(context, CachedJudge(RubricJudge()))),
    ):
        done = handler.handle(event, source)
        if not isinstance(done, Done):
            raise RuntimeError(f"the {role} handler rejected the template generation: {done}")
        made.append((role, model, done))
    out: dict[str, list[tuple[bytes, bytes]]] = {role: [] for role, _, _ in made}
    for key in balanced_keys(n, partitions, f"r{uuid.uuid4().hex[:6]}"):
        for role, model, done in made:
            template = decode(done.outputs[0].value or b"", model)
            copy = template.model_copy(update={"generation_id": key, "episode_id": key, "event_id": new_event_id()})
            out[role].append((key.encode(), encode(copy)))
    return out


def publish_results(run: BenchRun, n: int, *, interleaved: bool = True) -> None:
    """``n`` generations' execution, verdict and judgement on ``run``'s topics (its task stored), each generation's
    three together (``interleaved``) or every execution first, then every verdict, then every judgement."""
    task = call_task()
    registry = TaskRegistry(run.settings.tasks_dir)
    registry.store([task])
    inputs = results_of(task, registry, n, run.partitions)
    producer = make_producer(run.settings.kafka_client_config())
    order = [(role, i) for i in range(n) for role in inputs] if interleaved else \
        [(role, i) for role in inputs for i in range(n)]  # fmt: skip
    for role, i in order:
        key, value = inputs[role][i]
        producer.produce(run.topic(role), key=key, value=value)
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError(f"could not publish {n} generations' results")


def reward_processor_rps(n: int, *, interleaved: bool = True, processors: int = 1) -> dict[str, Any]:
    """Rewards/s of ``processors`` ``rewardstream reward run`` processes of one group (one by default) draining
    ``n`` generations' results, published a generation's three results together (``interleaved``, as the roles
    keep pace) or every execution first, then every verdict, then every judgement (one role far behind the
    others: every generation waits in the join table). CPU figures are the processes' sums."""
    with bench_run("rewards", 8) as run:
        publish_results(run, n, interleaved=interleaved)
        app_id = f"{run.settings.kafka.topic_prefix}rewards-app"
        run.extra_topics.append(changelog_name(app_id))
        reader = Reader(run, run.topic("rewards"))
        logs = [run.tmp / f"rewards-{i}.log" for i in range(processors)]
        procs: list[subprocess.Popen[bytes]] = []
        for log in logs:
            with log.open("wb") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "rewardstream", "reward", "run", "--app-id", app_id],
                    env={**os.environ, **run.env()}, stdout=out, stderr=subprocess.STDOUT))  # fmt: skip
        spent = [SteadyCpu(proc.pid) for proc in procs]

        def start(outputs: int) -> None:
            for cpu in spent:
                cpu.start(outputs)

        def alive() -> bool:
            return all(proc.poll() is None for proc in procs)

        try:
            timed = reader.wait(n, TIMEOUT_S, alive=alive, on_first=start)
            for cpu in spent:
                cpu.stop()
        except RuntimeError as exc:
            tails = "; ".join(log.read_text(errors="replace")[-3000:] for log in logs)
            raise RuntimeError(f"{exc}; the processors' logs: {tails}") from exc
        finally:
            reader.close()
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(60)
    steady = [cpu.per_output_us("reward", n) for cpu in spent]
    summed = {name: None if any(s[name] is None for s in steady) else sum(s[name] or 0 for s in steady)
              for name in steady[0]}  # fmt: skip
    return {"rewards": n, "interleaved": interleaved, "processors": processors, "rps": round(timed.rate(), 1),
            "cpu_us_per_reward": round(sum(cpu.whole_s for cpu in spent) / n * 1e6), **summed}  # fmt: skip


class SteadyCpu:
    """A process's CPU over its whole life, and over its steady state: from its first outputs read to its last
    (start-up and the wait for its partitions left out), in all and in its main thread (the Python code's)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.whole_s = 0.0
        self._first: tuple[int, float, float] | None = None
        self._steady: tuple[float, float] = (0.0, 0.0)

    def _now(self) -> tuple[float, float]:
        return cpu_seconds(self.pid), cpu_seconds(self.pid, thread=self.pid)

    def start(self, outputs: int) -> None:
        """The first ``outputs`` were just read."""
        self._first = (outputs, *self._now())

    def stop(self) -> None:
        """The last output was just read."""
        whole, main = self._now()
        self.whole_s = whole
        if self._first is not None:
            self._steady = (whole - self._first[1], main - self._first[2])

    def per_output_us(self, name: str, n: int) -> dict[str, int | None]:
        """The steady state's CPU per output of the ``n - first`` read after the first ones, all and main thread
        (None when every output came in the first read: a run too short to have one)."""
        left = n - (self._first[0] if self._first else 0)
        whole, main = self._steady
        return {f"steady_cpu_us_per_{name}": round(whole / left * 1e6) if left > 0 else None,
                f"steady_main_thread_us_per_{name}": round(main / left * 1e6) if left > 0 else None}  # fmt: skip


def cpu_seconds(pid: int, *, thread: int | None = None) -> float:
    """User + system CPU of a live process over its life, all its threads (librdkafka's) and start-up included;
    or of one of its threads (``thread``: its id; the process's id is its main thread, the Python code's)."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    with open(path) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---- one executor worker loop -----------------------------------------------------------------------------
def _noop_executor(settings: Settings, concurrency: int, artifacts: bool, stop: ProcessEvent) -> None:
    """The executor's loop and handler as ``workers.roles.service.build_worker`` wires them, the grader a
    NoopGrader (BENCHMARK ONLY); runs until ``stop``."""
    halt = relay(stop)
    metrics = WorkerMetrics("executor")
    config = worker_config(settings, "executor", concurrency=concurrency)
    specs = catalog_for(settings)
    store = artifact_store(settings, halt, metrics) if artifacts else None
    uploads = ThreadPoolExecutor(max(2, config.concurrency)) if store is not None else None
    tasks = TaskSource(TaskRegistry(settings.tasks_dir))
    context = RoleContext(role="executor", worker=worker_name(), tasks=tasks, artifacts=store,
                          output_topic=topic_for("executions", specs).name, uploads=uploads)  # fmt: skip
    grader = NoopGrader()
    handler = ExecutorHandler(context, grader)
    replies = topic_for("run_replies", specs)
    router = ExecutorRouter(handler, RunHandler(grader.sandbox, replies_topic=replies.name,
                                                partitions=replies.partitions, worker=context.worker))  # fmt: skip
    clients = loop_clients(settings, config, context.worker)
    producer, consumer, shipper = clients.producer, clients.consumer, clients.shipper
    TransactionalWorker(config, router, consumer=consumer, producer=producer, metrics=metrics, stop=halt,
                        shipper=shipper, models={topic_for("run_requests", specs).name: RunRequest}).run()  # fmt: skip
    if uploads is not None:
        uploads.shutdown()


def worker_rps(n: int, concurrency: int, *, artifacts: bool = False, max_in_flight: int = 0) -> dict[str, Any]:
    """Results/s of one executor loop with the no-op grader draining ``n`` generations."""
    partitions = 8
    with bench_run("loop", partitions, worker_store_artifacts=artifacts, worker_max_in_flight=max_in_flight) as run:
        registry = TaskRegistry(run.settings.tasks_dir)
        registry.store([call_task()])
        version = registry.latest_version(TASK_ID)  # pinned, as the SDK pins them
        events = generations(n, partitions, "def f():\n    return 1\n", "loop")
        run.publish(run.topic("generations"), [e.model_copy(update={"task_version": version}) for e in events])
        timed = _drain_in_child(run, "executions", n, _noop_executor, (run.settings, concurrency, artifacts))
    return {"results": n, "concurrency": concurrency, "artifacts": artifacts,
            "buffer": max_in_flight or max(64, 16 * concurrency), "rps": round(timed.rate(), 1)}  # fmt: skip


def _drain_in_child(run: BenchRun, output: str, n: int, target: Any, args: tuple[Any, ...]) -> Any:
    """Start ``target(*args, stop)`` in a fresh process, wait for ``n`` messages on ``output``, stop it."""
    reader = Reader(run, run.topic(output))
    stop = _SPAWN.Event()
    child = _SPAWN.Process(target=target, args=(*args, stop), daemon=True)
    child.start()
    try:
        return reader.wait(n, TIMEOUT_S, alive=child.is_alive)
    finally:
        reader.close()
        stop.set()
        child.join(60)
        if child.is_alive():
            child.kill()


# ---- one episode worker -----------------------------------------------------------------------------------
EPISODE_TASK = "bench/capacity-episode"


def episode_task(max_turns: int) -> Task:
    return Task.model_validate({
        "schema": "rewardstream.task/v1", "task_id": EPISODE_TASK, "prompt": "bench", "entry_point": "m:f",
        "workspace": {"files": {"m.py": "def f():\n    return 1\n"}},
        "episode": {"max_turns": max_turns, "step_timeout_s": 10, "idle_timeout_s": 3600},
        "hidden_tests": {"kind": "call", "cases": [{"id": "h0", "args": [], "expected": 1}]},
    })  # fmt: skip


def _noop_episode_worker(settings: Settings, concurrency: int, stop: ProcessEvent) -> None:
    """The episode worker as ``rewardstream worker episode`` wires it, its sandbox a NoopStepSandbox
    (BENCHMARK ONLY); runs until ``stop``."""
    halt = relay(stop)
    deps = Dependencies(sandbox=NoopStepSandbox(), registry=TaskRegistry(settings.tasks_dir))
    with build_episode_worker(settings, halt, WorkerMetrics("episode"), deps, concurrency) as worker:
        worker.run()


def episode_steps_rps(episodes: int, steps: int, concurrency: int) -> dict[str, Any]:
    """Steps/s of one episode worker (no-op sandbox) draining ``episodes`` x (open + ``steps`` ``exec true``)."""
    partitions = 8
    with bench_run("episodes", partitions) as run:
        run.extra_topics += [state_changelog(run.settings).name, clock_topic(run.settings).name]
        TaskRegistry(run.settings.tasks_dir).store([episode_task(steps + 2)])
        events: list[ActionEvent] = []
        keys = balanced_keys(episodes, partitions, "ep")
        for key in keys:
            events.append(ActionEvent.model_validate({"episode_id": key, "turn": 0, "action": {
                "action": "open", "task_id": EPISODE_TASK, "run_id": "bench", "policy_version": "bench"}}))  # fmt: skip
        for turn in range(1, steps + 1):
            events += [ActionEvent.model_validate({"episode_id": key, "turn": turn,
                                                   "action": {"action": "exec", "command": ["true"]}})
                       for key in keys]  # fmt: skip
        run.publish(run.topic("actions"), events)
        actions = len(events)
        timed = _drain_in_child(run, "observations", actions, _noop_episode_worker, (run.settings, concurrency))
    actions_rps = timed.rate()
    return {"episodes": episodes, "steps_each": steps, "concurrency": concurrency,
            "actions_rps": round(actions_rps, 1),
            "rps": round(actions_rps * steps / (steps + 1), 1)}  # fmt: skip

"""``rewardstream grade``: grade one solution, or a JSONL batch of them, in a sandbox backend.

Single: ``--task TASK.json --code FILE`` prints one result JSON. Batch: ``--tasks TASKS.jsonl --solutions
SOLUTIONS.jsonl --out RESULTS.jsonl`` (solution lines ``{"task_id", "generation_id", "language", "code"}``,
``language`` python unless given; a language a suite does not take fails it, ``unsupported_language``) writes one
result line per solution as it finishes, with a progress bar on stderr. The result JSON is a contract:
``{"generation_id", "task_id", "status": "pass"|"fail"|"sandbox_error", "public": {"passed", "total"},
"hidden": {"passed", "total"}, "flags", "reward", ...}``, with ``task_version``, the version of the task graded
against (its content digest, as the registry and the pipeline's events name it). The reward is the
pipeline's: the reward policy file (``--policy``, default the packaged one) applied by
``rewardstream.cli.graded``. Exit code 0 when every solution got a verdict, 1 when any ended
``sandbox_error``; bad input is one error line and exit code 2.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Annotated

import orjson
import pydantic
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rewardstream.cli.common import backend_option, load_settings, open_sandbox, print_json
from rewardstream.cli.graded import Graded, PolicyGrader
from rewardstream.cli.main import app
from schemas.backends import Backend
from schemas.caps import fit_item
from schemas.codec import one_line, problems_of
from schemas.errors import ConfigError, ValidationError
from schemas.events import RewardEvent
from schemas.solutions import Solution, numbered_solutions
from schemas.tasks import Task, task_version
from schemas.text import sanitize_text
from streams.reward.policy import Policy, load_policy
from workers.grading.grader import Grader, WorkspaceTaskError, refuse_workspace
from workers.languages import resolve
from workers.tasks.registry import TaskFileError, load_numbered


def _first_error(exc: pydantic.ValidationError) -> str:
    return one_line(problems_of(exc)[:1], "(line)")


def _one_shot(task: Task, where: str) -> Task:
    """``task``, unless it is a workspace task: the episode worker grades those, not ``grade``."""
    try:
        refuse_workspace(task)
    except WorkspaceTaskError as exc:
        raise ValidationError(f"{where}: {exc}") from None
    return task


def _load_task(path: Path) -> Task:
    try:
        task = Task.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    except pydantic.ValidationError as exc:
        raise ValidationError(f"{path}: {_first_error(exc)}") from None
    return _one_shot(task, str(path))


def _load_tasks(path: Path) -> dict[str, Task]:
    """The tasks of a JSONL file, read as the registry reads one (``workers.tasks.registry``); an error names
    its line."""
    try:
        numbered = load_numbered(path)
    except TaskFileError as exc:
        first, more = exc.errors[0], len(exc.errors) - 1
        problem = one_line([(first.path, first.problem)], "(line)") + (f" (and {more} more)" if more else "")
        raise ValidationError(f"{path}:{first.line}: {problem}") from None
    return {task.task_id: _one_shot(task, f"{path}:{n}") for n, task in numbered}


def _load_batch(tasks_path: Path, solutions_path: Path) -> tuple[dict[str, Task], list[Solution]]:
    tasks = _load_tasks(tasks_path)
    solutions: list[Solution] = []
    for n, sol in numbered_solutions(solutions_path):
        if sol.task_id not in tasks:
            raise ValidationError(f"{solutions_path}:{n}: task_id {sol.task_id!r} is not in {tasks_path}")
        solutions.append(sol)
    return tasks, solutions


def result_line(solution: Solution, graded: Future[Graded], version: str | None = None) -> tuple[str, float, bytes]:
    """(status, reward, JSONL line) of one solution: its own outcome, whatever happened to the others.

    A grader that raised, or a result that cannot be written, is an infrastructure failure of that one
    solution (``sandbox_error``, no verdict), never the end of the batch.
    """
    try:
        result = graded.result()
        return result.status, result.reward, orjson.dumps(result.to_json()) + b"\n"
    except Exception as exc:  # any failure is reported in its own line; the batch goes on
        why = f"grader failed on this solution: {type(exc).__name__}: {exc}"
    failed = {
        "generation_id": solution.generation_id,
        "task_id": solution.task_id,
        "status": "sandbox_error",
        "public": {"passed": 0, "total": 0},
        "hidden": {"passed": 0, "total": 0},
        "flags": [],
        "reward": 0.0,
        "reasons": [fit_item(RewardEvent, "reasons", sanitize_text(why))],
        "task_version": version,
    }
    return "sandbox_error", 0.0, orjson.dumps(failed) + b"\n"


@app.command("grade")
def grade_command(
    *,
    task: Annotated[Path | None, typer.Option("--task", help="one task JSON file (with --code)")] = None,
    code: Annotated[Path | None, typer.Option("--code", help="the solution's source file (with --task)")] = None,
    tasks: Annotated[Path | None, typer.Option("--tasks", help="tasks JSONL (batch mode)")] = None,
    solutions: Annotated[
        Path | None,
        typer.Option("--solutions", help='JSONL of {"task_id","generation_id","language","code"} (batch)'),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="results JSONL to write (batch mode)")] = None,
    backend: Annotated[str | None, typer.Option(help="process | docker (default: settings)")] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=256, help="solutions graded at once (batch)")] = 4,
    generation_id: Annotated[str, typer.Option(help="generation_id for the single result")] = "",
    language: Annotated[str, typer.Option(help="language of --code (python, c, cpp, java, go, rust, ...)")] = "python",
    policy: Annotated[
        Path | None, typer.Option("--policy", help="reward policy file (default: the packaged one, as the pipeline)")
    ] = None,
) -> None:
    """Grade one solution (--task/--code) or a batch (--tasks/--solutions/--out) and report results."""
    chosen = backend_option(backend)
    loaded = load_policy(policy)
    single = task is not None or code is not None
    batch = tasks is not None or solutions is not None or out is not None
    if single == batch:
        raise ConfigError("give either --task and --code, or --tasks, --solutions and --out")
    if single:
        if task is None or code is None:
            raise ConfigError("--task and --code go together")
        _grade_one(task, code, chosen, generation_id or code.stem, loaded, language)
        return
    if tasks is None or solutions is None or out is None:
        raise ConfigError("--tasks, --solutions and --out go together")
    _grade_many(tasks, solutions, out, chosen, concurrency, policy=loaded)


def _grade_one(  # noqa: PLR0917
    task_path: Path,
    code_path: Path,
    backend: Backend | None,
    gen: str,
    policy: Policy,
    language: str,
) -> None:
    the_task = _load_task(task_path)
    resolve(language)  # an unknown language is an error before any sandbox starts
    try:
        source = code_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {code_path}: {exc}") from exc
    sandbox = open_sandbox(load_settings(), backend)
    try:
        result = PolicyGrader(Grader(sandbox), policy).grade(the_task, source, generation_id=gen, language=language)
    finally:
        sandbox.close()
    print_json(result.to_json())
    if result.status == "sandbox_error":
        raise typer.Exit(1)


def _grade_many(
    tasks_path: Path,
    solutions_path: Path,
    out_path: Path,
    backend: Backend | None,
    concurrency: int,
    *,
    policy: Policy,
) -> None:
    the_tasks, sols = _load_batch(tasks_path, solutions_path)
    console = Console(stderr=True)
    counts: Counter[str] = Counter()
    reward_sum = 0.0
    lock = threading.Lock()
    sandbox = open_sandbox(load_settings(), backend)
    try:
        grader = PolicyGrader(Grader(sandbox), policy)
        with (
            out_path.open("wb") as fh,
            Progress(
                TextColumn("[bold]grading"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[summary]}"),
                console=console,
            ) as progress,
            ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="grade") as pool,
        ):
            bar = progress.add_task("grading", total=len(sols), summary="")
            futures = {
                pool.submit(
                    grader.grade, the_tasks[s.task_id], s.code, generation_id=s.generation_id, language=s.language
                ): s
                for s in sols
            }
            for fut in as_completed(futures):
                solution = futures[fut]
                status, reward, line = result_line(solution, fut, task_version(the_tasks[solution.task_id]))
                with lock:
                    fh.write(line)
                    fh.flush()
                    counts[status] += 1
                    reward_sum += reward
                summary = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
                progress.update(bar, advance=1, summary=summary)
    except OSError as exc:
        raise ConfigError(f"cannot write {out_path}: {exc}") from exc
    finally:
        sandbox.close()
    mean = reward_sum / len(sols) if sols else 0.0
    console.print(
        f"graded {len(sols)}: pass={counts['pass']} fail={counts['fail']} "
        f"sandbox_error={counts['sandbox_error']} mean_reward={mean:.3f} -> {out_path}"
    )
    if counts["sandbox_error"]:
        sys.stderr.flush()
        raise typer.Exit(1)

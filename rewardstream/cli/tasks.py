"""``rewardstream tasks load | validate | show | versions | list | policy | humaneval | examples``: the task registry.

A load of a changed task stores a new version (its content digest) and makes it the latest; the old one stays
readable (``show --version``), so what was graded against it can still be explained and replayed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import typer

from rewardstream.cli.common import backend_option, load_settings, open_sandbox, print_json
from rewardstream.cli.main import app
from schemas.errors import ValidationError
from schemas.settings import Settings
from schemas.tasks import Task
from workers.tasks.harbor.directory import TaskDirError
from workers.tasks.registry import StoreReport, TaskFileError, TaskRegistry, WeakTasksError, write_jsonl
from workers.tasks.s3_registry import S3TaskRegistry

if TYPE_CHECKING:
    from workers.containers.validation import TaskValidation

tasks_app = typer.Typer(
    help="Task registry: load JSONL tasks or Harbor task directories, show their public part.", no_args_is_help=True
)
app.add_typer(tasks_app, name="tasks")

_DIR = typer.Option(None, "--dir", help="registry directory (default: RS_TASKS_REGISTRY if set, else RS_TASKS_DIR)")
_REGISTRY = typer.Option(
    None,
    "--registry",
    help="registry in S3, s3://bucket/prefix, through RS_S3_ENDPOINT and its credentials (default: RS_TASKS_REGISTRY)",
)
_JSON = typer.Option(False, "--json", help="print JSON")
_FILE = typer.Argument(
    ...,
    help="JSONL file, one rewardstream.task/v1 per line; or a directory of Harbor tasks (each subdirectory "
    "holding a task.toml; task id = its name)",
)
_STRICT = typer.Option(
    False,
    "--strict",
    help="refuse the file (store nothing) if any task has a warning, e.g. a hidden suite that "
    "only repeats the public one",
)
_BUILD = typer.Option(
    True, "--build/--no-build", help="build each Harbor task's image on this host before storing (needs dockerd)"
)
_VALIDATE = typer.Option(
    False, "--validate", help="run each Harbor task's oracle and a no-op; store nothing if any task is invalid"
)
_TASK_IDS = typer.Argument(..., help="ids of Harbor tasks in the registry")
_JSON_LINES = typer.Option(False, "--json", help="one JSON object per task, one per line")
_TASK_ID = typer.Argument(..., help="task id, e.g. HumanEval/0")
_VERSION = typer.Option(None, "--version", help="a version of the task (default: its latest)")


def _registry(directory: Path | None, registry: str | None = None) -> TaskRegistry | S3TaskRegistry:
    """The registry --dir or --registry names, else the one the settings name (RS_TASKS_REGISTRY, RS_TASKS_DIR)."""
    from workers.tasks.reader import registry_from_settings

    if directory is not None and registry is not None:
        raise ValidationError("--dir and --registry name two registries: give one")
    if directory is not None:
        return TaskRegistry(directory)
    if registry is not None:
        return S3TaskRegistry.open(registry, load_settings())
    return registry_from_settings(load_settings())


@tasks_app.command("load")
def load(  # noqa: PLR0917 - a typer command: its options are its parameters
    file: Path = _FILE,
    directory: Path | None = _DIR,
    url: str | None = _REGISTRY,
    as_json: bool = _JSON,
    strict: bool = _STRICT,
    build: bool = _BUILD,
    validate: bool = _VALIDATE,
) -> None:
    """Validate every task in FILE (all errors, with line and field) and store them; nothing if any fails.

    Tasks whose hidden cases all repeat the public suite are stored with a warning (refused with --strict).
    A directory loads the Harbor tasks in it (every problem of every task named; nothing stored if any), and
    builds their images on this host first (a failed build stores nothing).
    """
    registry = _registry(directory, url)
    if validate and not file.is_dir():
        raise ValidationError("--validate is for a directory of Harbor tasks (a JSONL file has no oracle)")
    report = _stored(registry, file, strict, _prepare(build, validate) if file.is_dir() else None)
    for warning in report.warnings:
        print(f"{file}: warning: {warning}", file=sys.stderr)
    if as_json:
        where = {"registry": registry.root} if isinstance(registry, S3TaskRegistry) else {"dir": str(registry.root)}
        print_json({**report.as_json(), **where})
        return
    typer.echo(
        f"stored {len(report.added) + len(report.updated) + len(report.unchanged)} tasks in {registry.root} "
        f"({len(report.added)} added, {len(report.updated)} updated, {len(report.unchanged)} unchanged)"
    )
    for task_id in report.updated:  # what running pipelines grade unpinned generations against from now on
        was = report.replaced.get(task_id)
        typer.echo(f"updated {task_id}: version {report.versions[task_id]}" + (f" (was {was})" if was else ""))
    if report.migrated:
        typer.echo(f"{len(report.migrated)} task(s) stored before versions got their version files")


def _stored(
    registry: TaskRegistry | S3TaskRegistry, file: Path, strict: bool, prepare: Callable[[list[Task]], None] | None
) -> StoreReport:
    """Load ``file`` (a JSONL file, or a directory of Harbor tasks) into ``registry``; every problem is printed
    to stderr before the error that says nothing was stored."""
    try:
        if file.is_dir():
            return registry.load_dir(file, strict=strict, prepare=prepare)
        return registry.load_file(file, strict=strict)
    except TaskDirError as exc:
        for problem in exc.problems:
            print(f"{exc.source}: {problem}", file=sys.stderr)
        raise
    except TaskFileError as exc:
        for error in exc.errors:
            print(f"{exc.source}: {error}", file=sys.stderr)
        raise ValidationError(
            f"{len(exc.errors)} error(s) in {exc.source}, nothing stored; first: {exc.errors[0]}"
        ) from None
    except WeakTasksError as exc:
        for warning in exc.warnings:
            print(f"{exc.source}: refused (--strict): {warning}", file=sys.stderr)
        raise


def _prepare(build: bool, validate: bool) -> Callable[[list[Task]], None] | None:
    """What runs on a directory's tasks before they are stored: their images built, then (``validate``) each
    checked by its oracle and a no-op; an invalid task stops the load."""
    if not (build or validate):
        return None

    def prepare(tasks: list[Task]) -> None:
        settings = load_settings()
        client = _docker(settings)
        images = _images(settings, client, tasks)
        if not validate:
            return
        results = _validations(settings, client, tasks, images)
        for result in results:
            for flag in result.flags:
                print(f"{result.task_id}: {flag}", file=sys.stderr)
        invalid = [r for r in results if not r.valid]
        for result in invalid:
            print(f"{result.task_id}: invalid: {'; '.join(result.problems)}", file=sys.stderr)
        if invalid:
            raise ValidationError(f"{len(invalid)} of {len(results)} task(s) invalid (--validate), nothing stored")

    return prepare


def _docker(settings: Settings) -> Any:
    """The one docker client of a command that builds or runs Harbor tasks' images."""
    from schemas.errors import SandboxError
    from workers.sandbox.docker_backend import docker_client

    try:
        return docker_client(settings)
    except SandboxError as exc:
        raise SandboxError(
            f"Harbor tasks' images are built and run by dockerd ({exc}): start it (`rewardstream up`), or load "
            "with --no-build to build on first use"
        ) from exc


def _images(settings: Settings, client: Any, tasks: list[Task]) -> dict[str, str]:
    """Each task's image on this host (task id -> tag), built the first time."""
    from rewardstream.cli.task_images import task_image_source

    image_of = task_image_source(settings, client)
    return {task.task_id: image_of(task) for task in tasks}


def _validations(settings: Settings, client: Any, tasks: list[Task], images: dict[str, str]) -> list[TaskValidation]:
    """Each task validated on this host's backend (``RS_SANDBOX_BACKEND``), as its episodes will run: overlays
    of the image's tree on the process backend (falling back to containers, as the workers do, when this host
    cannot make them), containers on docker."""
    from rewardstream.cli.task_images import overlay_host
    from workers.containers.validation import validate_task

    overlays = overlay_host(settings, client, "tasks validate")
    try:
        return [validate_task(client, images[task.task_id], task, overlays) for task in tasks]
    finally:
        if overlays is not None:
            overlays.close()


@tasks_app.command("validate")
def validate_tasks(
    task_ids: list[str] = _TASK_IDS,
    directory: Path | None = _DIR,
    url: str | None = _REGISTRY,
    as_json: bool = _JSON_LINES,
) -> None:
    """Run each task's oracle (solution/solve.sh in a fresh sandbox of its image, then its verifier) and a no-op
    (the verifier on the untouched workspace): valid iff the oracle earns 1.0 and the no-op 0.0. Exits 1 if any is
    invalid. Runs on RS_SANDBOX_BACKEND (process: overlays of the image's tree; docker: containers); the images
    are built by dockerd either way."""
    registry = _registry(directory, url)
    tasks = [registry.task(task_id) for task_id in task_ids]
    settings = load_settings()
    client = _docker(settings)
    results = _validations(settings, client, tasks, _images(settings, client, tasks))
    for result in results:
        if as_json:
            sys.stdout.write(orjson.dumps(result.as_json()).decode() + "\n")
        elif result.valid:
            typer.echo(f"{result.task_id}: valid (oracle {result.oracle_reward}, no-op {result.noop_reward}, "
                       f"on {result.backend})")  # fmt: skip
        else:
            typer.echo(f"{result.task_id}: invalid: {'; '.join(result.problems)}")
        for flag in [] if as_json else result.flags:
            typer.echo(f"{result.task_id}: {flag}")
    sys.stdout.flush()
    if not all(result.valid for result in results):
        raise typer.Exit(1)


@tasks_app.command("show")
def show(
    task_id: str = _TASK_ID, directory: Path | None = _DIR, url: str | None = _REGISTRY, version: str | None = _VERSION
) -> None:
    """Print the public part of a task (never its hidden tests) as JSON: of its latest version, or of --version.
    ``task_version`` names the version shown."""
    public = _registry(directory, url).public(task_id, version)
    print_json(public.model_dump(mode="json", by_alias=True))


@tasks_app.command("versions")
def versions(
    task_id: str = _TASK_ID, directory: Path | None = _DIR, url: str | None = _REGISTRY, as_json: bool = _JSON
) -> None:
    """Print every stored version of a task, oldest first, and which is the latest."""
    registry = _registry(directory, url)
    latest = registry.latest_version(task_id)
    stored = registry.versions(task_id)
    if as_json:
        print_json({"task_id": task_id, "latest": latest, "versions": stored})
        return
    for item in stored:
        typer.echo(item + ("  latest" if item == latest else ""))


@tasks_app.command("list")
def list_(directory: Path | None = _DIR, url: str | None = _REGISTRY, as_json: bool = _JSON) -> None:
    """Print the ids of every stored task."""
    ids = _registry(directory, url).ids()
    if as_json:
        print_json({"tasks": ids})
    else:
        for task_id in ids:
            typer.echo(task_id)


_OUT = typer.Argument(..., help="JSONL file to write the converted tasks to")
_BACKEND = typer.Option(None, "--backend", help="sandbox backend: process or docker (default: RS_SANDBOX_BACKEND)")
_MUTANTS = typer.Option(
    0, "--mutants", min=0, max=64, help="mutants of each canonical solution its hidden suite must fail (0: none)"
)


@tasks_app.command("humaneval")
def humaneval(  # noqa: PLR0917 (typer options)
    out: Path = _OUT,
    backend: str | None = _BACKEND,
    workers: int = typer.Option(4, "--workers", min=1, max=64, help="parallel sandbox runs"),
    verify: bool = typer.Option(True, "--verify/--no-verify", help="grade the canonical solution on each task"),
    mutants: int = _MUTANTS,
    as_json: bool = _JSON,
) -> None:
    """Convert the packaged HumanEval set to tasks; expected values come from the canonical solution run
    in the sandbox. With --mutants N, each task's hidden suite must also fail small bugs planted in the canonical
    solution: a task whose hidden suite passes all of them is reported (its reward says nothing of correctness)."""
    from workers.tasks.humaneval import SandboxReference, convert_all, load_problems
    from workers.tasks.mutant_gate import check_tasks

    chosen = backend_option(backend)
    settings = load_settings()
    problems = load_problems()
    sandbox = open_sandbox(settings, chosen)
    try:
        reference = SandboxReference(sandbox)
        tasks, reports = convert_all(problems, reference, workers=workers, verify=verify)
        codes = {p.task_id: p.reference_code for p in problems}
        gate = check_tasks([(t, codes[t.task_id]) for t in tasks], reference.judge_hidden, mutants, workers=workers)
    finally:
        sandbox.close()
    write_jsonl(out, tasks)
    weak = [w for w in (r.warning() for r in gate) if w is not None]
    if as_json:
        problems_json = [r.as_json() for r in reports]
        if mutants > 0:
            for entry, mutant_report in zip(problems_json, gate, strict=True):
                entry["mutants"] = mutant_report.as_json()
        print_json({"out": str(out), "tasks": len(tasks), "problems": problems_json, "weak": [str(w) for w in weak]})
        return
    for warning in weak:
        typer.echo(f"warning: {warning}", err=True)
    calls = [r for r in reports if r.kind == "call"]
    dropped = sum(len(r.dropped) for r in reports)
    mismatches = sum(len(r.literal_mismatches) for r in reports)
    if mutants > 0:
        made = sum(r.mutants for r in gate)
        killed = sum(r.killed for r in gate)
        errors = sum(r.host_errors for r in gate)
        typer.echo(
            f"mutants: {killed}/{made - errors} killed by the hidden suites ({errors} host errors left out); "
            f"{len(weak)} task(s) whose hidden suite killed none"
        )
    typer.echo(
        f"wrote {len(tasks)} tasks to {out}: {len(calls)} call ({sum(r.public for r in calls)} public / "
        f"{sum(r.hidden for r in calls)} hidden cases), {len(reports) - len(calls)} assert; "
        f"{dropped} cases dropped, {mismatches} test literals disagreed with the canonical solution"
    )


_EXAMPLES_OUT = typer.Option(..., "--out", help="directory to write the task directories into (created)")


@tasks_app.command("examples")
def examples(out: Path = _EXAMPLES_OUT, as_json: bool = _JSON) -> None:
    """Write the Harbor tasks the repo ships (small buggy Python and C projects, each a git repository whose fix
    is on another branch, graded passed/total) as task directories under --out, for `tasks load OUT`.
    Their repositories are made with this host's git."""
    from workers.tasks.harbor.examples import write_tasks

    written = write_tasks(out)
    if as_json:
        print_json({"out": str(out), "tasks": [path.name for path in written]})
        return
    typer.echo(f"wrote {len(written)} Harbor tasks to {out}: {', '.join(path.name for path in written)}")
    typer.echo(f"load them: rewardstream tasks load {out} --validate")


_POLICY_REGISTRY = typer.Option(None, "--registry", help="s3://bucket/prefix (default: RS_TASKS_REGISTRY)")


@tasks_app.command("policy")
def policy(url: str | None = _POLICY_REGISTRY) -> None:
    """Print the IAM-style policy documents of an S3 registry, one per principal: loader (writes), worker (reads
    public/ only, hidden/ denied), verifier (reads public/ and hidden/). Attach each to its principal's user."""
    from schemas.registry_s3 import RegistryLocation
    from workers.tasks.s3_policy import registry_policies

    chosen = url or load_settings().tasks_registry
    if not chosen:
        raise ValidationError("no S3 registry: give --registry s3://bucket/prefix or set RS_TASKS_REGISTRY")
    print_json(registry_policies(RegistryLocation.parse(chosen)))

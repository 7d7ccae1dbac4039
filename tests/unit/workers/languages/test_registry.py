"""The language registry, the step driver's records as the host reads them, and which languages a task takes.

Pure: no sandbox. What a step run sends back is hostile, so ``read_step`` is fed forged and malformed output.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from guest.framing import MAGIC
from infra.local.sandbox_image import PACKAGES, TOOLCHAINS
from schemas.errors import SandboxError, ValidationError
from schemas.runs import COMPILE_FLOOR_MAX_S
from schemas.settings import PYTHON_TOOLCHAIN, Settings
from schemas.tasks import LANGUAGES, Task, language_problem
from workers.languages import source
from workers.languages.registry import REGISTRY, resolve, toolchains
from workers.languages.source import CompileLimits, _build, placed
from workers.languages.steps import Step, StepLimits, StepRun, read_step, relative_path, run_path, staged_path
from workers.sandbox.api import SandboxResult, SandboxStatus

NONCE = b"n" * 32
STEP = Step(toolchain="native", argv=("cc",), files={}, collect=("main", "build"))
LIMITS = StepLimits(timeout_s=5.0, memory_mb=256, max_collect_bytes=100, max_collect_files=4)


def test_registry_covers_every_language_on_a_known_toolchain() -> None:
    assert set(REGISTRY) == set(LANGUAGES)
    assert toolchains() <= {PYTHON_TOOLCHAIN, *TOOLCHAINS}
    for spec in REGISTRY.values():
        assert set(spec.executables) <= set(spec.artifacts)
        assert spec.compiled == bool(spec.artifacts)


@pytest.mark.parametrize(
    ("name", "language"),
    [
        ("python", "python"),
        ("cpp", "cpp"),
        ("nodejs", "javascript"),
        ("js", "javascript"),
        ("ts", "typescript"),
        ("typescript", "typescript"),
        ("go", "go"),
        ("java", "java"),
        ("rust", "rust"),
        ("bash", "bash"),
        ("php", "php"),
        ("lua", "lua"),
        ("perl", "perl"),
        ("ruby", "ruby"),
        ("c", "c"),
        ("R", "r"),
        ("csharp", "csharp"),
        ("kotlin_script", "kotlin"),
        ("scala", "scala"),
        ("racket", "racket"),
        ("verilog", "verilog"),
        ("D_ut", "d"),
    ],
)
def test_sandboxfusion_names_resolve(name: str, language: str) -> None:
    assert resolve(name).id == language


def test_unknown_language_is_named() -> None:
    with pytest.raises(ValidationError, match="unsupported language 'cobol'"):
        resolve("cobol")


def test_argv_takes_the_runs_memory_and_php_gets_its_tag() -> None:
    assert "-XX:MaxRAM=300m" in REGISTRY["java"].run_argv(300)
    assert REGISTRY["c"].run_argv(300) == ("./main",)
    assert REGISTRY["php"].prepare("echo 1;") == "<?php\necho 1;"
    assert REGISTRY["php"].prepare("<?php echo 1;") == "<?php echo 1;"


def test_new_families_leave_the_old_ones_alone() -> None:
    """R, C#, Kotlin, Scala, Racket, Verilog and D each live in a family of their own, never python's."""
    for language, family in {"r": "extra", "csharp": "extra", "verilog": "extra", "kotlin": "jvm2",
                             "scala": "jvm2", "racket": "racket", "d": "d"}.items():  # fmt: skip
        assert REGISTRY[language].toolchain == family
    heavy = {"default-jre-headless", "kotlin", "scala", "racket", "r-base-core", "mono-mcs", "mono-runtime",
             "iverilog", "gdc"}  # fmt: skip
    for family in ("jvm", "script", "native", "node"):
        assert not heavy & set(TOOLCHAINS[family]), family
    assert not heavy & set(PACKAGES)


def test_csharp_gets_the_implicit_usings_and_an_assert_that_fails() -> None:
    spec = REGISTRY["csharp"]
    text = spec.prepare("class P { static void Main() {} }")
    assert text.startswith("using System; ")
    assert text.endswith("\n#line 1\nclass P { static void Main() {} }")
    assert set(spec.support) == {"rs_assert.cs", "main.exe.config"}
    assert "rs_assert.cs" in (spec.compile or ())
    assert "RewardstreamAssert, main" in spec.support["main.exe.config"]


def test_jvm_compilers_size_their_heap_from_the_limit() -> None:
    for language in ("kotlin", "scala"):
        spec = REGISTRY[language]
        assert any("-XX:MaxRAM=1500m" in arg for arg in spec.compile_argv(1500)), language
        assert "-XX:MaxRAM=300m" in spec.run_argv(300)


def test_compile_floors_are_within_what_the_gateway_waits_for() -> None:
    assert max(spec.min_compile_timeout_s for spec in REGISTRY.values()) <= COMPILE_FLOOR_MAX_S


def test_compile_floor_raises_the_limits_of_slow_compilers(monkeypatch: pytest.MonkeyPatch) -> None:
    """kotlinc gets its floor whatever the caller asked; a fast compiler gets what was asked."""
    seen: list[StepLimits] = []
    steps: list[Step] = []

    def fake_run_step(sandbox: object, step: Step, limits: StepLimits, retry: object = None) -> StepRun:
        seen.append(limits)
        steps.append(step)
        return StepRun(None, error="stop")

    monkeypatch.setattr(source, "run_step", fake_run_step)
    asked = CompileLimits(timeout_s=4.0, memory_mb=512)
    source.compile_program(object(), "kotlin_script", "println(1)", limits=asked)  # type: ignore[arg-type]
    source.compile_program(object(), "c", "int main(){}", limits=asked)  # type: ignore[arg-type]
    kotlin, c = seen
    assert (kotlin.timeout_s, kotlin.memory_mb) == (60.0, 1024)
    assert (c.timeout_s, c.memory_mb) == (4.0, 512)
    # the toolchain's support files (kotlin's launcher) join the caller's and the source in the work dir
    source.compile_program(object(), "kotlin", "println(1)", files={"d.txt": b"x"})  # type: ignore[arg-type]
    assert set(steps[-1].files) == {"rs_kts.kt", "d.txt", "main.kts"}
    assert set(source.compile_program(object(), "racket", "").files) == {"main.rkt"}  # type: ignore[arg-type]


def test_toolchain_names_are_separate_from_the_python_image() -> None:
    settings = Settings(sandbox_image="reg.example/rs/rewardstream-sandbox-python:7")
    assert settings.toolchain_image("python") == "reg.example/rs/rewardstream-sandbox-python:7"
    assert settings.toolchain_image("native") == "reg.example/rs/rewardstream-sandbox-native:7"
    assert settings.toolchain_rootfs_path("jvm").name == "rootfs-jvm-7"
    assert settings.toolchain_rootfs_path("python") == settings.sandbox_rootfs_path()


@pytest.mark.parametrize("name", ["a", "a/b/c.txt", "/work/a/b"])
def test_relative_paths(name: str) -> None:
    assert relative_path(name) == name.removeprefix("/work/")


@pytest.mark.parametrize("name", ["", "/etc/passwd", "/work/", "../x", "a/../b", "a//b", "./a", "a/.", "a\0b"])
def test_paths_outside_the_work_dir_are_refused(name: str) -> None:
    with pytest.raises(SandboxError):
        relative_path(name)


def _line(record: dict[str, Any], nonce: bytes = NONCE) -> bytes:
    return b"\n" + MAGIC + b" " + nonce + b" " + json.dumps(record).encode() + b"\n"


def _step(**fields: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"exit": 0, "signal": None, "timeout": False, "output_limit": False, "ms": 5.0,
                           "cpu_ms": 4.0, "max_rss_kb": 1000, "stdout": "", "stderr": "", "stdout_bytes": 0,
                           "stderr_bytes": 0}  # fmt: skip
    rec.update(fields)
    return {"step": rec}


def _file(path: str, data: bytes) -> dict[str, Any]:
    return {"file": path, "b64": base64.b64encode(data).decode()}


def _result(stdout: bytes, status: SandboxStatus = SandboxStatus.OK) -> SandboxResult:
    return SandboxResult(status, 0, None, stdout, b"", False, False, 10.0, 5.0, 100, "process")


def test_records_need_the_runs_nonce_and_names_under_what_was_asked() -> None:
    out = b"".join(
        [
            _line({"hello": True}),
            _line(_step(stdout=base64.b64encode(b"hi").decode(), stdout_bytes=9)),
            _line(_file("main", b"ELF")),
            _line(_file("main", b"second copy")),  # a name once only
            _line(_file("build/A.class", b"cafe")),
            _line(_file("../escape", b"x")),  # not a relative path
            _line(_file("/etc/passwd", b"x")),
            _line(_file("other", b"x")),  # not asked for
            _line(_file("build/B.class", b"y"), nonce=b"f" * 32),  # forged: another nonce
            b"@@RS1 " + NONCE + b" {not json\n",
        ]
    )
    ran = read_step(_result(out), NONCE, STEP, LIMITS)
    assert ran.error is None
    assert ran.files == {"main": b"ELF", "build/A.class": b"cafe"}
    assert ran.stage is not None
    assert (ran.stage.status, ran.stage.stdout, ran.stage.stdout_truncated) == (SandboxStatus.OK, b"hi", True)


def test_returned_files_are_capped() -> None:
    out = _line({"hello": True}) + _line(_step()) + _line(_file("main", b"x" * 60)) + _line(_file("build/a", b"y" * 60))
    ran = read_step(_result(out), NONCE, STEP, LIMITS)
    assert ran.files == {"main": b"x" * 60}
    assert "over the 100-byte cap" in ran.missing["build/a"]


def test_no_hello_is_the_infrastructure_and_no_step_is_the_program() -> None:
    assert read_step(_result(b"forged output"), NONCE, STEP, LIMITS).error is not None
    errored = _result(b"", SandboxStatus.SANDBOX_ERROR)
    assert read_step(errored, NONCE, STEP, LIMITS).error is not None
    stopped = read_step(_result(_line({"hello": True}), SandboxStatus.TIMEOUT), NONCE, STEP, LIMITS)
    assert stopped.error is None
    assert stopped.stage is not None
    assert stopped.stage.status is SandboxStatus.TIMEOUT
    ended = read_step(_result(_line({"hello": True})), NONCE, STEP, LIMITS)  # the program ended the driver
    assert ended.stage is not None
    assert ended.stage.status is SandboxStatus.KILLED


@pytest.mark.parametrize(
    ("fields", "outer", "status"),
    [
        ({"exit": 3}, SandboxStatus.OK, SandboxStatus.NONZERO_EXIT),
        ({"exit": None, "signal": 11}, SandboxStatus.OK, SandboxStatus.CRASHED),
        ({"exit": None, "signal": 9}, SandboxStatus.OK, SandboxStatus.KILLED),
        ({"exit": None, "signal": 9}, SandboxStatus.MEMORY_LIMIT, SandboxStatus.MEMORY_LIMIT),
        ({"exit": None, "timeout": True}, SandboxStatus.OK, SandboxStatus.TIMEOUT),
        ({"exit": None, "output_limit": True}, SandboxStatus.OK, SandboxStatus.OUTPUT_LIMIT),
    ],
)
def test_stage_status(fields: dict[str, Any], outer: SandboxStatus, status: SandboxStatus) -> None:
    ran = read_step(_result(_line({"hello": True}) + _line(_step(**fields)), outer), NONCE, STEP, LIMITS)
    assert ran.stage is not None
    assert ran.stage.status is status


def _compile(fields: dict[str, Any], files: dict[str, bytes], missing: dict[str, str] | None = None) -> StepRun:
    out = _line({"hello": True}) + _line(_step(**fields)) + b"".join(_line(_file(n, d)) for n, d in files.items())
    ran = read_step(_result(out), NONCE, STEP, LIMITS)
    return ran if missing is None else StepRun(ran.stage, ran.files, missing, None)


@pytest.mark.parametrize(
    ("fields", "files", "status", "reason"),
    [
        ({}, {"main": b"ELF", "build/x": b"y"}, "ok", None),
        ({"exit": 1}, {}, "compile_error", "compile_error: the compiler exited 1"),
        ({"exit": None, "timeout": True}, {}, "compile_timeout", "compile_timeout: the compiler ran past its 20 s"),
        ({}, {"build/x": b"y"}, "compile_error", "compile_error: the build left no usable main"),
    ],
)
def test_build_outcomes(fields: dict[str, Any], files: dict[str, bytes], status: str, reason: str | None) -> None:
    build = _build(REGISTRY["c"], {"main.c": b"int main;"}, _compile(fields, files), CompileLimits())
    assert build.status == status
    assert build.error is None
    if reason is None:
        assert build.files == {"main.c": b"int main;", **files}
    else:
        assert build.reason is not None
        assert build.reason.startswith(reason)
        assert build.files == {}


def _task(**suite: Any) -> Task:
    io = {"kind": "io", "cases": [{"stdin": "1", "expected_stdout": "1"}], **suite}
    return Task.model_validate({"task_id": "t/1", "prompt": "p", "hidden_tests": io})


def test_which_languages_a_task_takes() -> None:
    assert all(language_problem(_task(), lang) is None for lang in LANGUAGES)
    only = _task(languages=["cpp", "java"])
    assert language_problem(only, "java") is None
    assert "does not accept rust" in (language_problem(only, "rust") or "")
    calls = Task.model_validate(
        {"task_id": "t/2", "prompt": "p", "entry_point": "f",
         "hidden_tests": {"kind": "call", "cases": [{"args": [1], "expected": 1}]}}
    )  # fmt: skip
    assert language_problem(calls, "python") is None
    assert "accepts python" in (language_problem(calls, "go") or "")
    assert "unknown language" in (language_problem(calls, "cobol") or "")
    assert "languages" not in _task().model_dump_json()


@pytest.mark.parametrize(
    ("name", "path"), [("a/b", "a/b"), ("/work/a", "a"), ("/mnt/b", "/mnt/b"), ("/tmp/x/y", "/tmp/x/y")]
)
def test_run_paths_reach_the_runs_own_mounts(name: str, path: str) -> None:
    assert run_path(name) == path
    staged = staged_path(path)
    assert relative_path(staged) == staged  # it travels in the work dir
    assert placed({staged: b""}) == (((staged, path),) if path.startswith("/") else ())


@pytest.mark.parametrize("name", ["/etc/passwd", "/mnt", "/mnt/", "/tmp/../etc/x", "/mnt/a//b", "/mntx/a", "/usr/x"])
def test_absolute_paths_elsewhere_are_refused(name: str) -> None:
    with pytest.raises(SandboxError):
        run_path(name)


def test_junit_sources_compile_in_one_file() -> None:
    code = "import x;\npublic class A {\n    public static class B {}\n}\npublic final class C {}\nclass T {}\n"
    prepared = resolve("junit").prepare(code)
    assert prepared == "import x;\nclass A {\n    public static class B {}\n}\nfinal class C {}\nclass T {}\n"
    assert resolve("pytest").toolchain == "python"
    assert "pytest" not in REGISTRY

"""Every language, graded right on both backends: a right, a wrong (passes public, fails hidden), a non-building
and (compiled languages) a compile-bomb solution, each through the grader and the pipeline's reward policy.

A build that fails is the candidate's failure (``compile_error``/``compile_timeout``, reward 0 with that
reason), never ``sandbox_error``; a bomb is stopped by the compile step's own limits. After each test the
backend's audit must find nothing left behind.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rewardstream.cli.graded import Graded, apply_policy
from schemas.tasks import LANGUAGES
from streams.reward.policy import Policy, load_policy
from workers.grading.grader import Grader, GraderConfig
from workers.languages import REGISTRY, CompileLimits, run_source
from workers.sandbox.api import Sandbox

from .conftest import audit
from .language_programs import SOLUTIONS, SUM_TASK

pytestmark = pytest.mark.sandbox

BACKENDS = ("process", "docker")
#: Tight compile limits for the bombs: what stops them is the compile step's own limits.
BOMB_LIMITS = CompileLimits(timeout_s=4.0, memory_mb=512)
#: How ``run_source`` says the compile step's limits stopped the compiler.
STOPPED_BY_LIMITS = ("compile_timeout: the compiler ran past its", "compile_error: the compiler ran out of its")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    sandbox: Sandbox = request.getfixturevalue(f"{request.param}_sandbox")
    yield sandbox
    leftovers = audit(sandbox)
    assert not leftovers, f"{request.param} left behind: {leftovers}"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(None)


def _grade(grader: Grader, policy: Policy, code: str, language: str) -> Graded:
    return apply_policy(grader.grade(SUM_TASK, code, generation_id=f"{language}-g", language=language), policy)


def test_every_language_is_registered() -> None:
    assert set(REGISTRY) == set(LANGUAGES) == set(SOLUTIONS)


@pytest.mark.parametrize("language", sorted(SOLUTIONS))
def test_graded_right(backend: Sandbox, policy: Policy, language: str) -> None:
    grader = Grader(backend)
    compiled = REGISTRY[language].compiled
    solutions = SOLUTIONS[language]

    right = _grade(grader, policy, solutions.right, language)
    assert right.status == "pass", right.to_json()
    assert right.reward == 1.0
    assert (right.result.public and right.result.public.passed, right.result.hidden.passed) == (1, 3)

    wrong = _grade(grader, policy, solutions.wrong, language)
    assert wrong.status == "fail", wrong.to_json()
    assert wrong.result.public is not None
    assert wrong.result.public.passed == 1
    assert wrong.result.hidden.passed < 3
    assert wrong.reward == 0.0

    broken = _grade(grader, policy, solutions.broken, language)
    assert broken.status == "fail", broken.to_json()
    assert broken.reward == 0.0
    assert broken.result.hidden.passed == 0
    if compiled:
        assert broken.result.run.status == "compile_error", broken.to_json()
        assert broken.result.compile is not None
        assert broken.result.compile.output.stderr
        assert any(reason.startswith("compile_error") for reason in broken.reasons), broken.reasons
    else:
        assert broken.result.run.status in ("ok", "nonzero_exit"), broken.to_json()

    if solutions.bomb is not None:
        bomb = apply_policy(
            Grader(backend, GraderConfig(compile_limits=BOMB_LIMITS)).grade(
                SUM_TASK, solutions.bomb, language=language
            ),
            policy,
        )
        assert bomb.status == "fail", bomb.to_json()
        assert bomb.result.run.status in ("compile_error", "compile_timeout"), bomb.to_json()
        if solutions.bomb_crash is None:  # the compile step's limits stopped it, not a plain compile error
            assert (bomb.result.run.error or "").startswith(STOPPED_BY_LIMITS), bomb.to_json()
        else:
            assert bomb.result.compile is not None
            assert solutions.bomb_crash.encode() in bomb.result.compile.output.stderr, bomb.to_json()
        assert bomb.reward == 0.0
        assert bomb.result.infra_error is None
        # kotlinc and scalac get their floor (``min_compile_timeout_s``) whatever the limits say. The compile's
        # own time (wall minus its wait for a CPU: what its limit counts) is bounded, however busy the host.
        compile_info = bomb.result.compile
        assert compile_info is not None, bomb.to_json()
        own_s = (compile_info.wall_ms - compile_info.wait_ms) / 1000
        assert own_s < 60 + REGISTRY[language].min_compile_timeout_s, bomb.to_json()


def test_run_source_files_in_and_out(backend: Sandbox) -> None:
    """SandboxFusion's /run_code shape: nested files in, compile, stdin, files fetched back."""
    code = (
        '#include <stdio.h>\n#include "inc/two.h"\nint main(void){int a;scanf("%d",&a);'
        'FILE*f=fopen("out/deep/r.txt","w");fprintf(f,"%d",a*TWO);fclose(f);printf("%d\\n",a+TWO);return 0;}\n'
    )
    files = {"inc/two.h": b"#define TWO 2\n", "/work/out/deep/keep": b""}
    ran = run_source(backend, "c", code, stdin=b"20\n", files=files, fetch_files=["out", "nothing/here"])
    assert ran.error is None
    assert ran.compile_status == "ok"
    assert ran.run is not None
    assert ran.run.status.value == "ok"
    assert ran.run.stdout == b"22\n"
    assert ran.files == {"out/deep/keep": b"", "out/deep/r.txt": b"40"}
    assert "nothing/here" in ran.missing
    timed = run_source(backend, "nodejs", "setTimeout(() => {}, 5000)", run_timeout_s=0.5)
    assert timed.run is not None, timed
    assert timed.run.status.value == "timeout", timed
    failed = run_source(backend, "go", "package main\nfunc main() { x }", compile_timeout_s=20)
    assert (failed.compile_status, failed.run) == ("compile_error", None)
    assert failed.compile is not None
    assert failed.compile.exit_code not in (0, None)


#: A program whose output directory is a 1,500-link chain (its own doing: the fetch finds nothing there).
CHAIN = (
    "import os\n"
    "os.mkdir('real')\n"
    "open('real/r.txt', 'w').write('r')\n"
    "for i in range(1500): os.symlink(f'l{i + 1}' if i < 1499 else 'real', f'l{i}')\n"
    "print('linked')\n"
)


def test_a_fetch_through_a_long_link_chain_is_missing_with_its_reason(backend: Sandbox) -> None:
    """The driver's check that a fetched path stays in the work dir (``os.path.realpath``) recursed once per
    link: a 1,500-link chain ended the driver before it said why the file was missing."""
    ran = run_source(backend, "python", CHAIN, fetch_files=["l0/r.txt", "real/r.txt"])
    assert ran.error is None
    assert ran.run is not None
    assert (ran.run.status.value, ran.run.stdout) == ("ok", b"linked\n")
    assert ran.files == {"real/r.txt": b"r"}
    assert ran.missing == {"l0/r.txt": "too many levels of symbolic links"}

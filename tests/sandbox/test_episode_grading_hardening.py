"""The grading run's own hardening without the protected-path reset, and no expected value in its view."""

from __future__ import annotations

import json

import pytest

from schemas.tasks import Task
from tests.sandbox.episode_grading_env import (
    FRACTIONS_SHADOW,
    PATCH_ADD,
    PTH_ADD,
    PYC,
    USER_SITE,
    raw_run,
    unchecked_pyc,
)
from tests.sandbox.swe_task import (
    CAPS,
    OPS_BUGGY,
    OPS_FIXED,
    snapshot,
    task,
)
from workers.episodes.step import StepAction, StepLimits, run_step
from workers.grading import Grader
from workers.sandbox.api import Sandbox

pytestmark = pytest.mark.sandbox


UNPROTECTED: dict[str, dict[str, str | bytes]] = {
    "sitecustomize.py in the workspace root": {"sitecustomize.py": PATCH_ADD},
    "a .pth in the user site under the workspace": {f"{USER_SITE}/hack.pth": PTH_ADD},
    "usercustomize.py in the user site": {f"{USER_SITE}/usercustomize.py": PATCH_ADD},
    "fractions.py shadowing the stdlib": {"fractions.py": FRACTIONS_SHADOW},
    "an unchecked pyc in __pycache__": {PYC: unchecked_pyc(OPS_FIXED, "calc/ops.py")},
}
#: What a naive run prints: the step runner's default environment (cwd and HOME are the workspace) and the
#: workspace on PYTHONPATH, before the standard library. 4 means the planted file took effect.
PROBE = "PYTHONPATH=. python3 -c 'import calc.ops; print(calc.ops.add(2, 2))'"


@pytest.mark.parametrize("kind", ["call", "io"])
@pytest.mark.parametrize("hack", list(UNPROTECTED))
def test_the_grading_run_ignores_what_the_workspace_plants(process_sandbox: Sandbox, hack: str, kind: str) -> None:
    final = snapshot(UNPROTECTED[hack])
    control = run_step(process_sandbox, final, StepAction.exec(PROBE, 10), CAPS, StepLimits(grace_s=20))
    assert control.stdout == b"4\n", (control.status, control.stdout, control.stderr)  # the plant is real
    task_ = task(kind)
    ran = Grader(process_sandbox).run_suites(
        "", task_.entry_point, [("hidden", task_.graded_suite)], task_.limits, workspace=raw_run(final).job()
    )
    assert ran.infra_error is None, ran.run
    assert ran.outcomes[0].passed == 0, ran.outcomes[0]


def test_commands_run_with_the_hardened_environment(process_sandbox: Sandbox) -> None:
    probe = (
        "import json, os, sys; print(json.dumps({'safe': sys.flags.safe_path, 'path': sys.path, 'cwd': os.getcwd(),"
        " 'prefix': sys.pycache_prefix, 'env': {k: v for k, v in os.environ.items() if k.startswith(('PY', 'HOME'))},"
        " 'user_site': __import__('site').ENABLE_USER_SITE}))"
    )
    base = task("io").model_dump(by_alias=True, mode="json")
    probing = Task.model_validate({**base, "public_tests": {"kind": "command", "command": ["python3", "-c", probe]}})
    assert probing.public_tests is not None
    ran = Grader(process_sandbox).run_suites(
        "",
        probing.entry_point,
        [("public", probing.public_tests)],
        probing.limits,
        workspace=raw_run(snapshot({})).job(),
    )
    assert ran.outcomes[0].cases[0].status == "passed", ran
    seen = json.loads(ran.output.stdout)
    ws = seen["cwd"]
    assert seen["safe"] == 1
    assert seen["user_site"] is False
    assert seen["path"][-1] == ws, seen  # the workspace after the stdlib and site-packages, once
    assert ws not in seen["path"][:-1], seen
    assert not seen["prefix"].startswith(ws + "/"), seen
    assert not seen["env"]["HOME"].startswith(ws), seen
    assert seen["env"]["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
    assert "-p no:cacheprovider" in seen["env"]["PYTEST_ADDOPTS"]
    assert OPS_BUGGY  # the workspace is the task's


#: Run by the code under test while the hidden suite is graded: looks for an expected value (one that no
#: hidden input contains) in every writable place of the sandbox and in every process it can see.
SEARCH = """
import os, sys
WANTED = str(10**20 + 7).encode()
MARKER = b"rs-" + b"marker-7f3a"  # written in the workspace: proves the search reads what is there
seen = found = marked = 0
def look(path):
    global seen, found, marked
    try:  # never blocks on a pipe, a FIFO or a terminal
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        data = os.read(fd, 1 << 22)
    except OSError:
        data = b""
    finally:
        os.close(fd)
    seen += 1
    marked += MARKER in data
    if WANTED in data:
        found += 1
        sys.stderr.write("FOUND " + path + "\\n")
for top in ("/work", "/tmp", "/dev/shm", "/run", "/var/tmp", "/home", "/root"):
    for root, dirs, files in os.walk(top):
        for name in files:
            look(os.path.join(root, name))
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for name in ("cmdline", "environ"):
            look(f"/proc/{pid}/{name}")
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            fds = []
        for fd in fds:
            look(f"/proc/{pid}/fd/{fd}")
sys.stderr.write(f"SEARCHED {seen} MARKED {marked} FOUND {found}\\n")
"""


def test_the_expected_values_are_nowhere_in_the_verification_run(process_sandbox: Sandbox) -> None:
    task_ = task("call")
    ran = Grader(process_sandbox).run_suites(
        "", task_.entry_point, [("hidden", task_.graded_suite)], task_.limits,
        workspace=raw_run(snapshot({"calc/ops.py": OPS_FIXED + SEARCH, "calc/marker.txt": "rs-marker-7f3a"})).job(),
    )  # fmt: skip
    assert ran.infra_error is None, ran.run
    report = ran.output.stderr.decode()
    assert "SEARCHED" in report, report
    assert int(report.split("SEARCHED ")[1].split()[0]) > 10, report  # files and fds were read
    assert " MARKED 1 " in report, report  # the workspace was among them
    assert report.strip().endswith("FOUND 0"), report
    assert ran.outcomes[0].all_passed  # the search changed nothing: the answers are the candidate's own

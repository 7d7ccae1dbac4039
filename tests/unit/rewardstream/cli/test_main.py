"""The CLI imports only the module of the command it runs; the map that says which module that is stays true."""

from __future__ import annotations

import subprocess
import sys

from rewardstream.cli.main import COMMAND_MODULES, _register, app


def _module_of(callback: object) -> str:
    return str(getattr(callback, "__module__", "")).removeprefix("rewardstream.cli.")


def test_every_command_is_mapped_to_the_module_that_registers_it() -> None:
    _register()
    seen = {
        c.name or (c.callback.__name__ if c.callback else ""): _module_of(c.callback) for c in app.registered_commands
    }
    for group in app.registered_groups:
        commands = group.typer_instance.registered_commands if group.typer_instance else []
        seen[group.name or ""] = _module_of(commands[0].callback)
    assert seen == COMMAND_MODULES


def test_running_one_command_imports_only_its_module() -> None:
    probe = (
        "import sys\nfrom rewardstream.cli.main import _register\n_register(['grade', '--help'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('rewardstream.cli.') and m != 'rewardstream.cli.main'))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    loaded = eval(out.stdout)  # noqa: S307 - our own probe's printed list
    assert "rewardstream.cli.grade" in loaded
    assert not {"rewardstream.cli.demo", "rewardstream.cli.serve", "rewardstream.cli.episode"} & set(loaded)


def test_help_and_unknown_commands_still_see_every_command() -> None:
    for argv in ([], ["--help"], ["no-such-command"]):
        result = subprocess.run(
            [sys.executable, "-m", "rewardstream", *argv], capture_output=True, text=True, timeout=60, check=False
        )
        text = result.stdout + result.stderr
        if argv == ["no-such-command"]:
            assert result.returncode == 2, text
            assert "No such command" in text, text
        else:
            assert all(name in text for name in COMMAND_MODULES), text


def test_each_command_runs_under_its_own_name_when_only_its_module_is_loaded() -> None:
    for name in ("grade", "demo", "up", "tasks"):
        result = subprocess.run(
            [sys.executable, "-m", "rewardstream", name, "--help"], capture_output=True, text=True, timeout=60,
            check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert f"rewardstream {name} [OPTIONS]" in " ".join(result.stdout.split()), result.stdout

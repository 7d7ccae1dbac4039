"""The trust boundary as a folder (issue 25): what runs inside a sandbox is ``workers/sandbox/guest/``, standard
library only, importing none of our code but the guest package's own modules, shipped with those spliced in.

The import-linter contracts in ``pyproject.toml`` check the same boundary on the import graph; this reads the
source, so it sees third-party imports too, and what the splice (``workers.sandbox.guest_source``) needs."""

from __future__ import annotations

import ast
import builtins
import dis
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from workers.episodes.step import BOOT as STEP_BOOT
from workers.episodes.step import runner_code
from workers.grading.suites import BOOT as HARNESS_BOOT
from workers.grading.suites import harness_source
from workers.languages.steps import driver_source
from workers.sandbox.boot import BOOT_COMMON, boot_source
from workers.sandbox.docker_config import INIT
from workers.sandbox.guest import framing
from workers.sandbox.guest_source import GUEST, program_source

ROOT = Path(__file__).resolve().parents[4]
GUEST_DIR = ROOT / GUEST.replace(".", "/")
MODULES = sorted(p.stem for p in GUEST_DIR.glob("*.py") if p.stem != "__init__")
#: The in-sandbox servers' sources, shipped by ``workers.sandbox.boot`` (the rest by ``guest_source``).
BOOTED = ("boot_common", "fork_server_main", "docker_entry_main")
#: The ``-c`` programs: the container's init, and the loaders of the harness, the step runner and the entry server.
LOADERS = ("container_init", "harness_boot", "step_boot", "entry_boot")


def tree(module: str) -> ast.Module:
    return ast.parse((GUEST_DIR / f"{module}.py").read_text(encoding="utf-8"))


def imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        return [("." * node.level) + (node.module or "")]
    return [alias.name for alias in node.names]


def is_guest(name: str) -> bool:
    return name.startswith(GUEST + ".") and name.removeprefix(GUEST + ".") in MODULES


def is_stdlib(name: str) -> bool:
    return not name.startswith(".") and name.split(".", maxsplit=1)[0] in sys.stdlib_module_names


def is_type_checking(node: ast.stmt) -> bool:
    """An ``if TYPE_CHECKING:`` block: imports for the type checker, never run (``TYPE_CHECKING = False``)."""
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def guest_imports(module: str) -> list[ast.ImportFrom]:
    """The top-level ``from <guest module> import ...`` lines of ``module``: the ones ``guest_source`` splices."""
    return [n for n in tree(module).body if isinstance(n, ast.ImportFrom) and is_guest(n.module or "")]


def bound(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """The names a module body binds at its top level, each with the statement that binds it."""
    names: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id: node for t in targets if isinstance(t, ast.Name)}
    return names


def literal(node: ast.stmt) -> object:
    if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
        return node  # never equal to another statement's value
    try:
        return ast.literal_eval(node.value)
    except ValueError:
        return node


def test_the_guest_package_holds_every_in_sandbox_program() -> None:
    assert {"harness", "step_runner", "driver", "clock", "framing", *LOADERS, *BOOTED} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_a_guest_module_imports_the_standard_library_and_the_guest_package_only(module: str) -> None:
    """Every import, at any depth (in a function, under ``TYPE_CHECKING``): a relative import is refused too,
    the splice would not resolve it."""
    found = [
        (node.lineno, name)
        for node in ast.walk(tree(module))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in imported(node)
        if not (is_stdlib(name) or is_guest(name))
    ]
    assert not found, f"{module}.py imports outside the standard library and {GUEST}: {found}"


def spliced_closure(module: str) -> list[str]:
    """The guest modules ``guest_source`` splices into ``module``, in the order it splices them: each one's own
    guest imports first, each module once."""
    order: list[str] = []

    def visit(name: str) -> None:
        for line in guest_imports(name):
            spliced = (line.module or "").removeprefix(GUEST + ".")
            if spliced not in order:
                order.append(spliced)
                visit(spliced)

    visit(module)
    return order


def futures(body: list[ast.stmt]) -> set[str]:
    return {a.name for n in body if isinstance(n, ast.ImportFrom) and n.module == "__future__" for a in n.names}


@pytest.mark.parametrize("module", [m for m in MODULES if guest_imports(m)])
def test_a_spliced_import_line_can_be_replaced_by_the_module_it_names(module: str) -> None:
    """What the splice needs: the line renames nothing (the module's own names land in the program's globals);
    the spliced module's ``__future__`` imports are the program's (their line is dropped where it lands); a
    name two of them define at their top level (the program and every module spliced into it, at any depth)
    is the same constant (else the program would see one value on the host and another inside the sandbox)."""
    program_body = tree(module).body
    defined = {module: bound(program_body)}
    for spliced in spliced_closure(module):
        body = tree(spliced).body
        defined[spliced] = bound(body)
        assert futures(body) <= futures(program_body) <= {"annotations"}, (module, spliced)
    for name in [module, *defined]:
        for line in guest_imports(name):
            target = defined[(line.module or "").removeprefix(GUEST + ".")]
            assert all(a.asname in (None, a.name) for a in line.names), f"{name}.py line {line.lineno}: renamed"
            assert {a.name for a in line.names} <= set(target), f"{name}.py line {line.lineno}"
    owners: dict[str, tuple[str, object]] = {}
    for owner, names in defined.items():
        for name, node in names.items():
            first = owners.setdefault(name, (owner, literal(node)))
            assert first[0] == owner or first[1] == literal(node), f"{owner}.py redefines {first[0]}.py's {name}"


def test_a_module_is_spliced_once_however_often_it_is_imported() -> None:
    """A module's state (``candidate_server``'s live servers) is one object in the shipped program, as on the
    host: a module two spliced modules import lands once, before the first."""
    source = harness_source().decode()
    assert source.count("_LIVE_SERVERS: set[int] = set()") == 1
    assert source.count("from __future__ import") == 1
    assert source.index("def encode_value(") < source.index("class Server:") < source.index("def main(")


@pytest.mark.parametrize(
    "source",
    [harness_source, driver_source, lambda: runner_code()[1], lambda: INIT, lambda: HARNESS_BOOT, lambda: STEP_BOOT],
    ids=["harness", "driver", "step_runner", "container_init", "harness_boot", "step_boot"],
)
def test_a_shipped_program_imports_only_the_standard_library(source: Callable[[], bytes | str]) -> None:
    """Its spliced modules may import each other for the type checker only (``TYPE_CHECKING`` is ``False``)."""
    shipped = [node for node in ast.parse(source()).body if not is_type_checking(node)]
    names = [
        name
        for node in shipped
        for n in ast.walk(node)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for name in imported(n)
    ]
    assert names, "the program imports something"
    assert all(is_stdlib(name) for name in names), [n for n in names if not is_stdlib(n)]


@pytest.mark.parametrize("module", BOOTED)
def test_a_booted_server_imports_our_code_only_for_the_type_checker(module: str) -> None:
    """The servers run after ``boot_common`` in one globals dict; they import it (``*``) only for mypy."""
    shipped = ast.parse(boot_source(f"{module}.py"))
    for node in shipped.body:
        if is_type_checking(node):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Import | ast.ImportFrom):
                assert all(is_stdlib(name) for name in imported(sub)), (module, sub.lineno)
    assert BOOT_COMMON == "boot_common.py"


@pytest.mark.parametrize("module", [m for m in BOOTED if m != "boot_common"])
def test_a_booted_server_defines_no_name_of_boot_common(module: str) -> None:
    """The server's main runs after ``boot_common`` (with what it splices) in the same globals: a name both
    define would be replaced without a word, unless it is the same constant."""
    shared = bound(ast.parse(boot_source(BOOT_COMMON)).body)
    main = bound(tree(module).body)
    clashes = [n for n in set(main) & set(shared) if literal(main[n]) != literal(shared[n])]
    assert not clashes, f"{module}.py redefines boot_common's {sorted(clashes)}"


def global_names(code: types.CodeType) -> set[str]:
    """The globals the functions and methods compiled in ``code`` read (``LOAD_GLOBAL``), at any depth."""
    names: set[str] = set()
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= {i.argval for i in dis.get_instructions(const) if i.opname == "LOAD_GLOBAL"}
            names |= global_names(const)
    return names


def shipped(program: str) -> list[tuple[str, str | bytes]]:
    """The files of ``program`` as it is shipped, in the order they run in one globals dict."""
    if program in BOOTED:
        return [(name, boot_source(name)) for name in (BOOT_COMMON, f"{program}.py")]
    loaders: dict[str, Callable[[], str | bytes]] = {
        "harness": harness_source,
        "driver": driver_source,
        "step_runner": lambda: runner_code()[1],
        "container_init": lambda: INIT,
        "harness_boot": lambda: HARNESS_BOOT,
        "step_boot": lambda: STEP_BOOT,
        "entry_boot": lambda: program_source("entry_boot.py"),
    }
    return [(f"{program}.py", loaders[program]())]


@pytest.mark.parametrize("program", ["harness", "driver", "step_runner", *LOADERS, *BOOTED[1:]])
def test_every_global_a_shipped_program_reads_is_defined(program: str) -> None:
    """Run as it is shipped (not as ``__main__``, so only its definitions run), in one globals dict: every
    global its functions read is defined there or a builtin. What the splice, or ``boot_common``, stopped
    defining would otherwise first show inside a sandbox, as a NameError."""
    scope: dict[str, object] = {"__name__": "shipped", "INPUT": b""}
    read: set[str] = set()
    for name, source in shipped(program):
        code = compile(source, name, "exec", dont_inherit=True)
        exec(code, scope)  # noqa: S102 - our own guest program, only its definitions
        read |= global_names(code)
    missing = sorted(read - set(scope) - set(dir(builtins)))
    assert not missing, f"{program}: read but defined nowhere: {missing}"


def test_the_wire_bytes_of_the_record_protocol() -> None:
    """Both sides read these from one module: changing one is a protocol change, for both at once."""
    assert (framing.MAGIC, framing.STEP_MAGIC, framing.NONCE_LEN) == (b"@@RS1", b"@@RSTEP1", 32)
    assert framing.frame_prefix(b"n" * 32) == b"@@RS1 " + b"n" * 32 + b" "
    assert framing.frame_prefix(b"n" * 32, framing.STEP_MAGIC) == b"@@RSTEP1 " + b"n" * 32 + b" "

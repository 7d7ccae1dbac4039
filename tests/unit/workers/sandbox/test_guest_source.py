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
from pathlib import Path

import pytest

from workers.sandbox.guest import framing
from workers.sandbox.guest_program import LOADER, guest_program
from workers.sandbox.guest_source import GUEST

ROOT = Path(__file__).resolve().parents[4]
GUEST_DIR = ROOT / GUEST.replace(".", "/")
MODULES = sorted(p.stem for p in GUEST_DIR.glob("*.py") if p.stem != "__init__")
#: The programs that run inside a sandbox, each shipped by ``guest_program`` and run by the one ``loader``.
PROGRAMS = ("harness", "step_runner", "driver", "fork_server_main", "docker_entry_main", "container_init")


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
    assert {*PROGRAMS, "loader", "boot_common", "clock", "framing"} <= set(MODULES)


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
    source = guest_program("harness.py").source.decode()
    assert source.count("_LIVE_SERVERS: set[int] = set()") == 1
    assert source.count("from __future__ import") == 1
    assert source.index("def encode_value(") < source.index("class Server:") < source.index("def main(")


def shipped_source(program: str) -> str:
    """The text ``program`` runs as inside a sandbox: the loader's ``-c`` source, or a program's spliced source."""
    return LOADER if program == "loader" else guest_program(f"{program}.py").source.decode()


@pytest.mark.parametrize("program", [*PROGRAMS, "loader"])
def test_a_shipped_program_imports_only_the_standard_library(program: str) -> None:
    """Its spliced modules may import each other for the type checker only (``TYPE_CHECKING`` is ``False``)."""
    shipped = [node for node in ast.parse(shipped_source(program)).body if not is_type_checking(node)]
    names = [
        name
        for node in shipped
        for n in ast.walk(node)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for name in imported(n)
    ]
    assert names, "the program imports something"
    assert all(is_stdlib(name) for name in names), [n for n in names if not is_stdlib(n)]


def global_names(code: types.CodeType) -> set[str]:
    """The globals the functions and methods compiled in ``code`` read (``LOAD_GLOBAL``), at any depth."""
    names: set[str] = set()
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= {i.argval for i in dis.get_instructions(const) if i.opname == "LOAD_GLOBAL"}
            names |= global_names(const)
    return names


@pytest.mark.parametrize("program", [*PROGRAMS, "loader"])
def test_every_global_a_shipped_program_reads_is_defined(program: str) -> None:
    """Run as it is shipped (not as ``__main__``, so only its definitions run): every global its functions
    read is defined there or a builtin. What the splice stopped defining would otherwise first show inside a
    sandbox, as a NameError."""
    scope: dict[str, object] = {"__name__": "shipped"}
    code = compile(shipped_source(program), f"{program}.py", "exec", dont_inherit=True)
    exec(code, scope)  # noqa: S102 - our own guest program, only its definitions
    missing = sorted(global_names(code) - set(scope) - set(dir(builtins)))
    assert not missing, f"{program}: read but defined nowhere: {missing}"


def test_the_wire_bytes_of_the_record_protocol() -> None:
    """Both sides read these from one module: changing one is a protocol change, for both at once."""
    assert (framing.MAGIC, framing.STEP_MAGIC, framing.NONCE_LEN) == (b"@@RS1", b"@@RSTEP1", 32)
    assert framing.frame_prefix(b"n" * 32) == b"@@RS1 " + b"n" * 32 + b" "
    assert framing.frame_prefix(b"n" * 32, framing.STEP_MAGIC) == b"@@RSTEP1 " + b"n" * 32 + b" "

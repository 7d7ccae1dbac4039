"""The language registry: for each language id, its toolchain family, file name, compile and run argv.

One job: say how a program in a language is built and run inside the sandbox. Nothing here runs anything.
Our ids are ``schemas.tasks.Language``; SandboxFusion's names (what its ``/run_code`` clients send, e.g.
``nodejs``) resolve to them as aliases (``resolve``).

Conventions a solution must follow (documented in the README):
* Java: the program is ``public class Main`` (file ``Main.java``), run with assertions on (``-ea``).
* Go: ``package main`` (file ``main.go``), built without cgo.
* TypeScript is transpiled (syntax errors are compile errors, type errors are not: as SandboxFusion's ``tsx``).
* PHP: ``<?php`` is added when the code has none (as SandboxFusion does).
Compiled programs are built in one sandbox run (``compile`` argv, its own limits) and handed to the runs as
the files ``artifacts`` names; interpreted ones run their source. Argv items may hold ``{memory_mb}`` (the
limit of the run they are for), so a runtime sizes its heap to the sandbox's limit, not the host's memory.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas.errors import ValidationError
from schemas.settings import PYTHON_TOOLCHAIN

#: Node: TypeScript to JavaScript with Debian's ``typescript`` module, per file, no type check. A syntax error
#: is printed like tsc prints it and exits 1 (a compile error); ``esModuleInterop`` so ``import x from "m"``
#: works on CommonJS modules.
_TS_TRANSPILE = (
    'const ts=require("typescript"),fs=require("fs");const[src,out]=process.argv.slice(1);'
    'const r=ts.transpileModule(fs.readFileSync(src,"utf8"),{fileName:src,reportDiagnostics:true,'
    "compilerOptions:{module:ts.ModuleKind.CommonJS,target:ts.ScriptTarget.ES2020,esModuleInterop:true}});"
    "const d=r.diagnostics||[];for(const x of d){const p=x.file&&x.start!==undefined?"
    "x.file.getLineAndCharacterOfPosition(x.start):null;process.stderr.write(src+(p?`(${p.line+1},"
    '${p.character+1})`:"")+`: error TS${x.code}: ${ts.flattenDiagnosticMessageText(x.messageText,"\\n")}\\n`);}'
    "if(d.length)process.exit(1);fs.writeFileSync(out,r.outputText);"
)
#: A top-level ``public class`` (or interface, enum, record): one declared at the start of a line.
_PUBLIC_CLASS = re.compile(r"^public\s+(?=(?:(?:final|abstract)\s+)*(?:class|interface|enum|record)\b)", re.M)
#: Go: no cgo (no C toolchain reached from Go code), caches in the run's private /tmp, no network, no
#: module downloads; ``GOMAXPROCS`` bounds the threads a program starts (they count against the pids limit).
_TMP = "/tmp"  # noqa: S108 - the sandbox run's own private /tmp
_GO_ENV = {
    "GOCACHE": f"{_TMP}/go-cache",
    "GOPATH": f"{_TMP}/go",
    "HOME": _TMP,
    "CGO_ENABLED": "0",
    "GO111MODULE": "off",
    "GOPROXY": "off",
    "GOMAXPROCS": "2",
}
#: The JVM: one GC thread, heap sized from the run's memory limit (not the host's RAM).
_JVM = ("-XX:+UseSerialGC", "-XX:MaxRAM={memory_mb}m", "-Xss64m")
#: Jars on every Java program's classpath (Debian's, in the jvm family): SandboxFusion's tests import them.
_JARS = "/usr/share/java/javatuples.jar"
_JUNIT = "/usr/share/java/junit-platform-console-standalone.jar"


@dataclass(frozen=True, slots=True)
class LanguageSpec:
    """How one language is built and run in the sandbox (argv run in the work dir, ``/work``)."""

    id: str
    toolchain: str
    source: str
    run: tuple[str, ...]
    compile: tuple[str, ...] | None = None
    #: What the compile step hands to the runs: files or directories of the work dir (regular files only).
    artifacts: tuple[str, ...] = ()
    #: Artifacts that must be executable in the run (the compile run's file modes are not trusted).
    executables: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    #: SandboxFusion's names for this language (``/run_code``'s ``language``).
    aliases: tuple[str, ...] = ()
    #: SandboxFusion builds it inside its run command (``go test``), so the build may take the run's time too.
    build_in_run_time: bool = False

    @property
    def compiled(self) -> bool:
        """Whether a compile step runs before the program can (its failure is ``compile_error``)."""
        return self.compile is not None

    def run_argv(self, memory_mb: int) -> tuple[str, ...]:
        """The run's argv for a run limited to ``memory_mb``."""
        return tuple(arg.replace("{memory_mb}", str(memory_mb)) for arg in self.run)

    def compile_argv(self, memory_mb: int) -> tuple[str, ...]:
        """The compile step's argv for a compile limited to ``memory_mb`` (empty if not compiled)."""
        return tuple(arg.replace("{memory_mb}", str(memory_mb)) for arg in self.compile or ())

    def prepare(self, code: str) -> str:
        """The source file's text for ``code`` (PHP gets its opening tag if it has none)."""
        if self.id == "php" and "<?php" not in code:
            return "<?php\n" + code
        if self.id == "junit":  # any top-level class name compiles in Main.java once none is public
            return _PUBLIC_CLASS.sub("", code)
        return code


_SPECS = (
    LanguageSpec("python", PYTHON_TOOLCHAIN, "main.py", ("python3", "main.py"), aliases=("python3", "py")),
    LanguageSpec(
        "c", "native", "main.c", ("./main",),
        compile=("gcc", "-std=gnu17", "-O2", "-pipe", "-o", "main", "main.c", "-lm"),
        artifacts=("main",), executables=("main",),
    ),
    LanguageSpec(
        "cpp", "native", "main.cpp", ("./main",),
        compile=("g++", "-std=gnu++17", "-O2", "-pipe", "-o", "main", "main.cpp", "-lm", "-lpthread"),
        artifacts=("main",), executables=("main",), aliases=("c++",),
    ),
    LanguageSpec(
        "rust", "native", "main.rs", ("./main",),
        compile=("rustc", "--edition", "2021", "-O", "-C", "strip=debuginfo", "-o", "main", "main.rs"),
        artifacts=("main",), executables=("main",), aliases=("rs",),
    ),
    LanguageSpec(
        "go", "native", "main.go", ("./main",),
        compile=("go", "build", "-ldflags=-s -w", "-o", "main", "main.go"),
        artifacts=("main",), executables=("main",), env=_GO_ENV, aliases=("golang",),
    ),
    LanguageSpec(
        "java", "jvm", "Main.java", ("java", *_JVM, "-cp", f"build:.:{_JARS}", "-ea", "Main"),
        compile=("javac", *(f"-J{a}" for a in _JVM[:2]), "-J-XX:TieredStopAtLevel=1", "-encoding", "UTF-8",
                 "-cp", f".:{_JARS}", "-d", "build", "Main.java"),
        artifacts=("build",),
    ),
    LanguageSpec("javascript", "node", "main.js", ("node", "main.js"), aliases=("nodejs", "js", "node")),
    LanguageSpec(
        "typescript", "node", "main.ts", ("node", "main.js"),
        compile=("node", "-e", _TS_TRANSPILE, "main.ts", "main.js"), artifacts=("main.js",), aliases=("ts",),
    ),
    LanguageSpec("bash", PYTHON_TOOLCHAIN, "main.sh", ("bash", "main.sh"), aliases=("sh",)),
    LanguageSpec("php", "script", "main.php", ("php", "-f", "main.php")),
    LanguageSpec("ruby", "script", "main.rb", ("ruby", "main.rb"), aliases=("rb",)),
    LanguageSpec("lua", "script", "main.lua", ("lua5.4", "main.lua")),
    LanguageSpec("perl", "script", "main.pl", ("perl", "main.pl"), aliases=("pl",)),
)  # fmt: skip

#: SandboxFusion's test modes (``/run_code`` only, not languages of a generation): the program is a test file,
#: run by the language's test runner; it passes when every test does.
_MODES = (
    LanguageSpec(
        "pytest", PYTHON_TOOLCHAIN, "test_main.py",
        ("python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_main.py"),
    ),
    LanguageSpec(
        "go_test", "native", "main_test.go",
        # `go test`'s own summary line after the test binary's verbose output (SandboxFusion runs `go test`).
        ("bash", "-c", './main.test -test.v && echo "ok  	main" || { r=$?; echo "FAIL	main"; exit $r; }'),
        compile=("go", "test", "-c", "-o", "main.test", "main_test.go"),
        artifacts=("main.test",), executables=("main.test",),
        env={**_GO_ENV, "GOPATH": f"{_TMP}/go:/usr/share/gocode"}, build_in_run_time=True,
    ),
    LanguageSpec(
        "junit", "jvm", "Main.java",
        ("java", *_JVM, "-jar", _JUNIT, "-cp", f"build:{_JARS}", "--scan-classpath", "--disable-banner"),
        compile=("javac", *(f"-J{a}" for a in _JVM[:2]), "-J-XX:TieredStopAtLevel=1", "-encoding", "UTF-8",
                 "-cp", f".:{_JUNIT}:{_JARS}", "-d", "build", "Main.java"),
        artifacts=("build",),
    ),
)  # fmt: skip

#: Every language by id.
REGISTRY: dict[str, LanguageSpec] = {spec.id: spec for spec in _SPECS}
_BY_NAME: dict[str, LanguageSpec] = {
    **{alias: spec for spec in _SPECS for alias in spec.aliases},
    **{spec.id: spec for spec in _MODES},
    **REGISTRY,
}


def resolve(name: str) -> LanguageSpec:
    """The language ``name`` names (our id or a SandboxFusion name, case-sensitive as theirs);
    ``ValidationError`` naming the supported ones otherwise."""
    spec = _BY_NAME.get(name)
    if spec is None:
        known = ", ".join(sorted(_BY_NAME))
        raise ValidationError(f"unsupported language {name!r} (supported: {known})")
    return spec


def toolchains() -> frozenset[str]:
    """Every toolchain family a language (or a test mode) needs."""
    return frozenset(spec.toolchain for spec in (*_SPECS, *_MODES))

"""The language registry: for each language id, its toolchain family, file name, compile and run argv.

One job: say how a program in a language is built and run inside the sandbox. Nothing here runs anything.
Our ids are ``schemas.tasks.Language``; SandboxFusion's names (what its ``/run_code`` clients send, e.g.
``nodejs``) resolve to them as aliases (``resolve``).

Conventions a solution must follow (documented in docs/languages.md):
* Java: the program is ``public class Main`` (file ``Main.java``), run with assertions on (``-ea``).
* Go: ``package main`` (file ``main.go``), built without cgo.
* TypeScript is transpiled (syntax errors are compile errors, type errors are not: as SandboxFusion's ``tsx``).
* PHP: ``<?php`` is added when the code has none (as SandboxFusion does).
* R: a script run with ``Rscript`` (file ``main.R``; SandboxFusion's name ``R``).
* C#: any class with a static ``Main`` (SandboxFusion's samples use ``public class Program``, file
  ``Program.cs``), built by mono's ``mcs`` with ``DEBUG`` defined. The usings .NET 6 implies (``System``,
  ``System.Linq``, ...) are added on a line of their own before the code (``#line 1`` keeps the compiler's line
  numbers the code's), and a failed ``Debug.Assert`` ends the program with exit 134 and the message on stderr, as
  ``dotnet run`` does (mono's own default would ignore it: a wrong program would pass its asserts).
* Kotlin: a Kotlin *script* (file ``main.kts``; SandboxFusion's ``kotlin_script``, which runs ``kotlin
  x.kts``): top-level statements run in order, so a ``fun main()`` runs only if the script calls it. Compiled
  by kotlinc 1.3 to a jar with a small launcher (``RewardstreamKts``) that runs the script class.
* Scala 2.11: the entry is the first ``object NAME`` in the code (SandboxFusion's rule; none is a compile
  error, ``Object name not found.``), which defines ``main`` or ``extends App``; file ``Main.scala``.
* Racket: ``racket main.rkt``; the code starts with its ``#lang`` line.
* Verilog: SystemVerilog (``iverilog -g2012``, file ``main.sv``) whose top module (the testbench) is ``tb``,
  run by ``vvp -n``; stdin is ``$fscanf(32'h8000_0000, ...)``. As SandboxFusion, after verilog-eval.
* D: ``main.d``, built by gdc 12 with ``-funittest`` (SandboxFusion's ``D_ut`` builds with ``dmd
  -unittest``): ``unittest`` blocks run first, a failing one exits 1, then ``main`` runs.
Compiled programs are built in one sandbox run (``compile`` argv, its own limits) and handed to the runs as
the files ``artifacts`` names; interpreted ones run their source. Argv items may hold ``{memory_mb}`` (the
limit of the run they are for), so a runtime sizes its heap to the sandbox's limit, not the host's memory.
kotlinc and scalac need more time than the default compile limit: their specs raise the compile's limits to a
floor (``min_compile_timeout_s``, ``min_compile_memory_mb``) whatever the caller asked for.
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
#: kotlinc and scalac in the JVM: the heap is 60% of the compile's limit (the default quarter makes them
#: collect most of the time), C1 only (quicker for a one-shot compile, fewer compiler threads).
_JVM_COMPILER = (*_JVM, "-XX:MaxRAMPercentage=60", "-XX:TieredStopAtLevel=1")
_KOTLIN_LIB = "/usr/share/kotlin/kotlinc/lib"
_SCALA_LIB = "/usr/share/scala/lib"
#: Runs the compiled script class ``Main`` (main.kts): its constructor is the script's body.
_KTS_LAUNCHER = """object RewardstreamKts {
    @JvmStatic fun main(args: Array<String>) {
        val script = Class.forName("Main").getConstructor(Array<String>::class.java)
        try { script.newInstance(args as Any) }
        catch (e: java.lang.reflect.InvocationTargetException) { throw e.cause ?: e }
    }
}
"""
#: Scala's entry object, by SandboxFusion's rule (the first ``object NAME``), into the jar's manifest.
_SCALAC = (
    'name=$(grep -oE "object[[:space:]]+[A-Za-z0-9_]+" Main.scala | head -n 1 | sed -E "s/^object[[:space:]]+//")\n'
    '[ -n "$name" ] || { echo "Object name not found." >&2; exit 1; }\n'
    f"exec java {' '.join(_JVM_COMPILER)} -cp {_SCALA_LIB}/scala-compiler.jar:{_SCALA_LIB}/scala-library.jar:"
    f"{_SCALA_LIB}/scala-reflect.jar -Dscala.usejavacp=true scala.tools.nsc.Main -encoding UTF-8 "
    '-Xmain-class "$name" -d main.jar Main.scala\n'
)
#: C#: the usings .NET 6 implies (``ImplicitUsings``), on one line before the code; ``#line 1`` after them.
_CS_USINGS = (
    "using System; using System.Collections.Generic; using System.IO; using System.Linq; using System.Text; "
    "using System.Threading; using System.Threading.Tasks;\n#line 1\n"
)
#: A failed ``Debug.Assert`` ends the program (exit 134, the message on stderr), as on .NET; mono would carry on.
_CS_ASSERT = """sealed class RewardstreamAssert : System.Diagnostics.TraceListener {
    public override void Write(string m) {}
    public override void WriteLine(string m) {}
    public override void Fail(string m, string d) {
        System.Console.Out.Flush();
        System.Console.Error.WriteLine("Process terminated. Assertion failed." + (m == null ? "" : "\\n" + m)
            + (d == null ? "" : "\\n" + d));
        System.Environment.Exit(134);
    }
}
"""
_CS_CONFIG = (
    '<?xml version="1.0"?>\n<configuration><system.diagnostics><trace autoflush="true"><listeners><clear/>'
    '<add name="rs" type="RewardstreamAssert, main"/></listeners></trace></system.diagnostics></configuration>\n'
)


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
    #: Files the toolchain adds to the work dir (the compile's and the runs'): launchers, config.
    support: Mapping[str, str] = field(default_factory=dict)
    #: The least a compile of this language is given, whatever the caller's limits (kotlinc, scalac).
    min_compile_timeout_s: float = 0.0
    min_compile_memory_mb: int = 0

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
        if self.id == "csharp":
            return _CS_USINGS + code
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
    LanguageSpec("r", "extra", "main.R", ("Rscript", "main.R"), aliases=("R",)),
    LanguageSpec(
        "csharp", "extra", "Program.cs", ("mono", "main.exe"),
        compile=("mcs", "-d:DEBUG", "-optimize+", "-nowarn:105", "-out:main.exe", "Program.cs", "rs_assert.cs"),
        artifacts=("main.exe",), aliases=("cs", "c#"),
        support={"rs_assert.cs": _CS_ASSERT, "main.exe.config": _CS_CONFIG},
    ),
    LanguageSpec(
        "kotlin", "jvm2", "main.kts",
        ("java", *_JVM, "-cp", f"main.jar:{_KOTLIN_LIB}/kotlin-stdlib.jar:{_KOTLIN_LIB}/kotlin-script-runtime.jar",
         "-ea", "RewardstreamKts"),
        compile=("java", *_JVM_COMPILER, "-cp", f"{_KOTLIN_LIB}/kotlin-preloader.jar",
                 "org.jetbrains.kotlin.preloading.Preloader", "-cp", f"{_KOTLIN_LIB}/kotlin-compiler.jar",
                 "org.jetbrains.kotlin.cli.jvm.K2JVMCompiler", "-no-reflect", "-d", "main.jar", "main.kts",
                 "rs_kts.kt"),
        artifacts=("main.jar",), aliases=("kotlin_script", "kts"), support={"rs_kts.kt": _KTS_LAUNCHER},
        min_compile_timeout_s=60.0, min_compile_memory_mb=1024,
    ),
    LanguageSpec(
        "scala", "jvm2", "Main.scala",
        ("java", *_JVM, f"-Xbootclasspath/a:{_SCALA_LIB}/scala-library.jar", "-ea", "-jar", "main.jar"),
        compile=("sh", "-c", _SCALAC), artifacts=("main.jar",),
        min_compile_timeout_s=40.0, min_compile_memory_mb=1024,
    ),
    LanguageSpec("racket", "racket", "main.rkt", ("racket", "main.rkt"), aliases=("rkt",)),
    LanguageSpec(
        "verilog", "extra", "main.sv", ("vvp", "-n", "main.vvp"),
        compile=("iverilog", "-Wall", "-Winfloop", "-Wno-timescale", "-g2012", "-s", "tb", "-o", "main.vvp",
                 "main.sv"),
        artifacts=("main.vvp",), aliases=("systemverilog", "sv"),
    ),
    LanguageSpec(
        "d", "d", "main.d", ("./main", "--DRT-testmode=run-main"),
        compile=("gdc", "-O2", "-funittest", "-o", "main", "main.d"),
        artifacts=("main",), executables=("main",), aliases=("D_ut", "dlang"),
    ),
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

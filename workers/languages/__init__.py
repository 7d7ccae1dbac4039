"""Every language in the sandboxes: the registry (how each is built and run), the compile step, and
``run_source`` (one program compiled and run, SandboxFusion's ``/run_code``)."""

from workers.languages.registry import REGISTRY, LanguageSpec, resolve
from workers.languages.source import Build, CompileLimits, SourceRun, compile_program, run_source

__all__ = [
    "REGISTRY",
    "Build",
    "CompileLimits",
    "LanguageSpec",
    "SourceRun",
    "compile_program",
    "resolve",
    "run_source",
]

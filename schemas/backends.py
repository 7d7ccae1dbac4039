"""The sandbox backends, named once: what settings, the CLI, the factory and the benchmarks may choose."""

from __future__ import annotations

from typing import Literal

#: ``process``: namespaces and seccomp around a process on this host; ``docker``: a container per sandbox.
Backend = Literal["process", "docker"]
BACKENDS: tuple[Backend, ...] = ("process", "docker")

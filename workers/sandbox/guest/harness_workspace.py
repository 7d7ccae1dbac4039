"""Where a grading job's commands run when the candidate is a directory, not a program text: an agent
episode's final workspace (restored by the step runner's own ``restore``, spliced in here too), or a program
built in another language (its files are the work dir).

Guest code (standard library only), spliced into the grading harness (``harness``).
"""

from __future__ import annotations

import os

from workers.sandbox.guest.plumbing import make_executable
from workers.sandbox.guest.typed_values import HarnessError, type_name
from workers.sandbox.guest.workspace_snapshot import restore

#: What a workspace's ``sitecustomize`` (in a site dir outside it, first on ``PYTHONPATH``) does for commands
#: run under ``PYTHONSAFEPATH``: the workspace goes on ``sys.path`` after the stdlib and site-packages.
SITECUSTOMIZE = "import sys\nif {ws!r} not in sys.path:\n    sys.path.append({ws!r})\n"


class Workspace:
    """A workspace job's layout in the work dir, made by the parent before any candidate process exists.

    ``dir`` is the restored workspace (absolute); ``pycache`` an empty directory outside it where bytecode is
    looked up instead of the workspace's ``__pycache__``; ``env`` the whole environment of its commands.
    """

    def __init__(self, directory: str, pycache: str, env: dict[str, str]) -> None:
        self.dir = directory
        self.pycache = pycache
        self.env = env

    @classmethod
    def prepare(cls, spec: object) -> Workspace:
        """Restore the workspace tar the host sent (``spec["tar"]``, a canonical snapshot) into
        ``spec["dir"]`` with the step runner's own ``restore``, and lay out the bytecode and site dirs.
        HarnessError (the job's fault: infrastructure) when anything fails."""
        names = ("tar", "dir", "pycache", "site")
        if type(spec) is not dict or any(
            type(spec.get(k)) is not str or "/" in spec[k] or spec[k] in ("", ".", "..") for k in names
        ):
            raise HarnessError("workspace job without its file names")
        extra = spec.get("env")
        if type(extra) is not dict or not all(type(k) is str and type(v) is str for k, v in extra.items()):
            raise HarnessError("workspace job without its environment")
        root = os.getcwd()
        ws, pycache, site = (os.path.join(root, spec[k]) for k in ("dir", "pycache", "site"))
        try:
            with open(spec["tar"], "rb") as f:
                data = f.read()
            os.unlink(spec["tar"])
            for path in (ws, pycache, site):
                os.mkdir(path, 0o755)
            os.chdir(ws)
            try:
                restore(data)
            finally:
                os.chdir(root)
            with open(os.path.join(site, "sitecustomize.py"), "w") as f:
                f.write(SITECUSTOMIZE.format(ws=ws))
        except Exception as exc:
            raise HarnessError(f"cannot restore the workspace: {type_name(exc)}: {exc}") from None
        env = {**os.environ, **extra, "PYTHONPATH": site, "PYTHONPYCACHEPREFIX": pycache}
        return cls(ws, pycache, env)

    @classmethod
    def program(cls, spec: object) -> Workspace:
        """A built program in any language (header ``"program"``): its files are the work dir as the host
        wrote them, io suites run their ``command`` there with the sandbox's environment. ``executables`` are
        made executable first (the host writes every file 0644), never through a link; one that is missing
        or not a regular file is left alone: running it then fails, the candidate's failure."""
        if type(spec) is not dict or type(spec.get("executables")) is not list:
            raise HarnessError("program job without its executables")
        for name in spec["executables"]:
            if type(name) is not str or not name or name.startswith("/") or ".." in name.split("/"):
                raise HarnessError("program job with a bad executable name")
            make_executable([name])
        return cls(os.getcwd(), "", dict(os.environ))

"""``python -m infra.k8s build|up|down|status``: the local cluster the Kubernetes end-to-end test runs on.

``build`` compiles what is missing (cached under ``<RS_CACHE_DIR>/k8s``), ``up`` starts the cluster and prints
one JSON line of start-up seconds last, ``down`` stops it and restores the host, ``status`` prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

from infra.k8s.build import ensure_binaries, find_go, go_version
from infra.k8s.cluster import LocalCluster
from infra.k8s.layout import K8sPaths
from infra.k8s.teardown import exit_on_sigterm
from schemas.errors import PlatformError
from schemas.settings import Settings


def default_paths() -> K8sPaths:
    return K8sPaths(Settings().local.cache_dir / "k8s", go_version(find_go()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.k8s", description=__doc__)
    parser.add_argument("command", choices=("build", "up", "down", "status"))
    parser.add_argument("--no-keda", action="store_true", help="without KEDA (no KEDA build, no operator/adapter)")
    parser.add_argument("--jobs", type=int, default=1, help="parallel compiles of a build (it runs niced anyway)")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    keda = not args.no_keda
    try:
        paths = default_paths()
        if args.command == "build":
            timings = ensure_binaries(paths, keda=keda, jobs=args.jobs, report=print)
            print(json.dumps({"built_seconds": {k: round(v) for k, v in timings.items()}}))
        elif args.command == "up":
            cluster = LocalCluster(paths)
            result = cluster.up(keda=keda, report=print)
            print(json.dumps({"ready_seconds": result.seconds, "restored": result.restored}))
        elif args.command == "down":
            done = LocalCluster(paths).down(report=print)
            print(json.dumps({"restored": done}))
        else:
            print(json.dumps(LocalCluster(paths).status()))
    except PlatformError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m infra.image [--families all|python,...] [--tag T] [--save PATH]``: what ``make image`` runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from infra.image.build import build_image, parse_families, save_image
from schemas.errors import RewardstreamError
from schemas.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    """Build the image, save it if asked; print one JSON line (tag, families, seconds, size)."""
    parser = argparse.ArgumentParser(prog="python -m infra.image", description=__doc__)
    parser.add_argument("--families", default="all", help="toolchain families baked in: all, or python,native,...")
    parser.add_argument("--tag", default=None, help="image tag (default: the project's version)")
    parser.add_argument("--save", type=Path, default=None, help="also write a tarball for `ctr images import`")
    parser.add_argument("--python", default=sys.executable, help="the python whose pip builds the wheels")
    args = parser.parse_args(argv)
    try:
        built = build_image(Settings(), ROOT, families=parse_families(args.families), tag=args.tag, python=args.python)
        saved = save_image(built.tag, args.save) if args.save else None
    except RewardstreamError as exc:
        print(f"image: error: {exc}", file=sys.stderr)
        return 2
    report = {
        "tag": built.tag,
        "families": list(built.families),
        "build_seconds": round(built.seconds, 1),
        "size_mb": round(built.size_bytes / 1e6, 1),
        "tarball": str(saved) if saved else None,
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

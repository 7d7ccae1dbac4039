"""Repositories in a task's WORKDIR keep only HEAD's history: the last step of every task image's build.

Why: the agent must not recover the answer from history the task author forgot (the fix on another branch,
a tag, a stash, a reflog entry: a 2026 audit of SWE-bench Pro found agents reading the gold fix out of
``.git``). Every ref but HEAD's branch is deleted, reflogs expired and unreachable objects pruned; each ref
removed is printed with ``MARK`` so the load can warn naming it. A repository in an image without ``git``
cannot be trimmed, and the build fails saying so.
"""

from __future__ import annotations

import shlex

from workers.images.script_tar import script_tar

MARK = "RS-TRIMMED:"
ERROR_MARK = "RS-TRIM-ERROR:"
SCRIPT_NAME = "rs-trim-git.sh"
SCRIPT = f"""#!/bin/sh
# rs-trim-git.sh WORKDIR: keep only HEAD's history in every repository under WORKDIR.
set -e
trim() {{
  repo=$(dirname "$1")
  if ! command -v git >/dev/null 2>&1; then
    echo "{ERROR_MARK} $repo is a git repository and the image has no git to keep only HEAD's history"
    exit 3
  fi
  g() {{ git -c safe.directory='*' -C "$repo" "$@"; }}
  head=$(g symbolic-ref -q HEAD || true)
  g for-each-ref --format='%(refname)' | while read -r ref; do
    if [ "$ref" != "$head" ]; then g update-ref -d "$ref"; echo "{MARK} $repo: $ref"; fi
  done
  rm -f "$1/ORIG_HEAD" "$1/FETCH_HEAD" "$1/MERGE_HEAD" "$1/CHERRY_PICK_HEAD"
  g reflog expire --expire=now --all
  g gc --prune=now --quiet
}}
[ -d "$1" ] || exit 0
find "$1" -name .git -type d -prune -print | while read -r gitdir; do trim "$gitdir"; done
"""


def trim_context(base_id: str, workdir: str, user: str) -> bytes:
    """The build context of the trimming step: ``FROM`` the built image, the script run as root over
    ``workdir``, the image's own ``user`` restored."""
    dockerfile = (
        f"FROM {base_id}\nUSER root\nCOPY {SCRIPT_NAME} /{SCRIPT_NAME}\n"
        f"RUN sh /{SCRIPT_NAME} {shlex.quote(workdir)} && rm -f /{SCRIPT_NAME}\n" + (f"USER {user}\n" if user else "")
    )
    return script_tar({"Dockerfile": dockerfile, SCRIPT_NAME: SCRIPT})


def trimmed_refs(lines: list[str]) -> list[str]:
    """``repo: ref`` of every ref the trimming step removed, from its output lines."""
    return [line.split(MARK, 1)[1].strip() for line in lines if MARK in line]

"""``rs-as-agent CMD...``: how a task's tests run the agent's code without handing it the verifier's powers.

``test.sh`` runs as root (as in Harbor), so agent code it runs directly could write ``/logs/verifier/reward.json``
itself (which wins over the tests' ``reward.txt``) or read ``/tests``. Through ``rs-as-agent`` that code runs as
``nobody``: ``/logs`` and ``/tests`` are root's (``/tests`` 0700), WORKDIR is the agent's to write. Installed in
every verifier container; ``tasks validate`` flags a task whose reward a planted writer moves.
"""

from __future__ import annotations

import shlex

from workers.images.script_tar import script_tar

PATH = "/usr/local/bin/rs-as-agent"
#: The unprivileged uid and gid agent code runs as (``nobody``/``nogroup`` on Debian and Ubuntu).
AGENT_ID = 65534
SCRIPT = f"""#!/bin/sh
# rs-as-agent CMD...: run CMD as the unprivileged agent (uid {AGENT_ID}): no write to /logs, no read of /tests.
if [ "$#" -eq 0 ]; then echo "usage: rs-as-agent CMD [ARG...]" >&2; exit 2; fi
command -v setpriv >/dev/null 2>&1 || {{ echo "rs-as-agent: setpriv (util-linux) is not in this image" >&2; exit 127; }}
exec setpriv --reuid={AGENT_ID} --regid={AGENT_ID} --clear-groups -- "$@"
"""


def prepare_script(workdir: str) -> str:
    """Run as root before test.sh: the agent's WORKDIR becomes its uid's to write; nothing else does."""
    return f"chown -R {AGENT_ID}:{AGENT_ID} -- {shlex.quote(workdir)}"


def install_tar() -> bytes:
    """A tar holding ``rs-as-agent`` (root's, 0755), to extract at ``/usr/local/bin``."""
    return script_tar({"rs-as-agent": SCRIPT})

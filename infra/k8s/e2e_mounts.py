"""What each role's pod sees of the task registry, asked inside the running pods: the chart mounts a node's registry
(``tasks.hostPath``) whole only into the roles that grade with hidden tests, and its public part alone into every
other role, whose root (the process backend's) the registry's permissions on ``hidden/`` would not stop.

The rule is pure (``problems``, unit-tested); ``seen`` runs a one-line probe in one pod of each Deployment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from infra.k8s.kubectl import Kubectl

#: The roles (container names) that read the tasks' hidden part.
HIDDEN_READERS = frozenset({"verifier", "auditor"})
#: Where the chart mounts the registry (RS_TASKS_DIR in the pods).
TASKS_DIR = "/var/lib/rewardstream/tasks"
_PROBE = f"import os; print(int(os.path.isdir('{TASKS_DIR}/public')), int(os.path.isdir('{TASKS_DIR}/hidden')))"


@dataclass(frozen=True, slots=True)
class Sight:
    """Whether a pod sees the registry's public and hidden parts."""

    public: bool
    hidden: bool


def problems(seen: Mapping[str, Sight]) -> list[str]:
    """What is wrong with what each role sees; nothing when every role has the public part and only the hidden
    readers the hidden one."""
    out: list[str] = []
    readers = " and ".join(sorted(HIDDEN_READERS))
    for role, sight in sorted(seen.items()):
        if not sight.public:
            out.append(f"{role}: the tasks' public part is not mounted at {TASKS_DIR}/public")
        if sight.hidden and role not in HIDDEN_READERS:
            out.append(f"{role}: sees the hidden tests at {TASKS_DIR}/hidden, which only {readers} may")
        if role in HIDDEN_READERS and not sight.hidden:
            out.append(f"{role}: grades with hidden tests but has no {TASKS_DIR}/hidden")
    return out


def seen(kubectl: Kubectl, namespace: str) -> dict[str, Sight]:
    """Role (its container's name) -> what one of its running pods sees."""
    found = kubectl.get("deployments", f"--namespace={namespace}") or {}
    out: dict[str, Sight] = {}
    for deployment in found.get("items", []):
        name = deployment["metadata"]["name"]
        role = deployment["spec"]["template"]["spec"]["containers"][0]["name"]
        printed = kubectl.run("exec", f"deployment/{name}", f"--namespace={namespace}", "--", "python3", "-c", _PROBE)
        public, hidden = printed.split()
        out[role] = Sight(public == "1", hidden == "1")
    return out

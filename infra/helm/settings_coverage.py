"""Which ``RS_*`` settings the chart decides from its values, and why each other one is left to ``settings:``.

Why: a setting added to ``schemas/settings.py`` that a deployment must decide (``RS_WORKER_REBALANCE_DRAIN_S``
was one: the pods' grace period depends on it) would otherwise be missed by the chart without a word, its
default running on every pod. ``deploy-check`` (and a unit test) fail until each setting of the groups a
deployment runs with is either written by a template or listed in ``LEFT_TO_SETTINGS`` with the reason; and
the values schema refuses, in ``settings:``, the names the templates write (two sources for one variable).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from schemas.settings import ENV_PREFIX, Settings, env_name, flat_names

#: The groups of settings the chart's pods read (``local`` is the local platform's: ``rewardstream up``).
GROUPS = ("kafka", "opensearch", "s3", "sandbox", "worker", "judge", "gateway")
_KNOB = "a tuning knob with a sound default: through settings"
#: Settings the chart does not write, each with why; every one can still be given through ``settings:``.
LEFT_TO_SETTINGS: dict[str, str] = {
    "RS_GATEWAY_BODY_TIMEOUT_S": _KNOB,
    "RS_GATEWAY_INSTANCE_ID": "per replica: its default (host-pid-random) is the only right value",
    "RS_GATEWAY_KAFKA_TIMEOUT_S": _KNOB,
    "RS_GATEWAY_MAX_BATCH": _KNOB,
    "RS_GATEWAY_MAX_BODY_BYTES": _KNOB,
    "RS_GATEWAY_PEER_BODY_READS": _KNOB,
    "RS_GATEWAY_REWARD_CACHE": _KNOB,
    "RS_GATEWAY_REWARD_LOOKBACK": _KNOB,
    "RS_GATEWAY_REWARD_WAIT_S": _KNOB,
    "RS_GATEWAY_RUN_QUEUE_S": _KNOB,
    "RS_GATEWAY_TOKEN_CONCURRENCY": _KNOB,
    "RS_JUDGE_CACHE_SIZE": _KNOB,
    "RS_JUDGE_CONCURRENCY": "the judge client's cap on server requests; the role's own is roles.judge.concurrency",
    "RS_JUDGE_RETRIES": _KNOB,
    "RS_JUDGE_TIMEOUT_S": _KNOB,
    "RS_KAFKA_BROKERS": "how many brokers `rewardstream up` runs locally; the chart's cluster is the operator's, "
    "its topics' replicas are kafka.replicationFactor (RS_TOPIC_REPLICATION_FACTOR)",
    "RS_KAFKA_SSL_CA_LOCATION": "a path inside the pod: mount the cluster's CA (a Secret or ConfigMap volume) and "
    "name the file through settings (unset: the image's system CAs)",
    "RS_OPENSEARCH_INDEX_PREFIX": _KNOB,
    "RS_INDEXER_BATCH_SIZE": _KNOB,
    "RS_LOG_RETENTION_DAYS": _KNOB,
    "RS_LOG_RETENTION_GB": _KNOB,
    "RS_OPENSEARCH_REPLICAS": _KNOB,
    "RS_S3_ARTIFACT_EXPIRY_DAYS": _KNOB + " (the workers install the bucket's expiry rule from it)",
    "RS_SANDBOX_CGROUP_PARENT": "the process backend uses its container's own cgroup, under the mounted cgroupfs",
    "RS_SANDBOX_IMAGE": "docker backend only: the sandbox image the engine at dockerHost holds",
    "RS_SANDBOX_POOL_SIZE": "docker backend only: " + _KNOB,
    "RS_SANDBOX_ROOTFS": "a path inside the image (make image puts the sandbox trees at the default)",
    "RS_SANDBOX_RUN_DIR": "the chart mounts its emptyDir at the default path, /run/rewardstream-sandbox",
    "RS_SANDBOX_TASK_IMAGES": "image tasks only (local bases or a registry): through settings",
    "RS_SANDBOX_TOOLCHAINS_DIR": "a path inside the image (make image puts the toolchain trees at the default)",
    "RS_SANDBOX_UID": "the image's sandbox user: fixed by the image",
    "RS_TASKS_CACHE_MB": _KNOB + " (the cache emptyDir is 4Gi)",
    "RS_WORKER_COMMIT_INTERVAL_S": _KNOB,
    "RS_CRASH_ATTEMPTS": _KNOB,
    "RS_EPISODE_RETENTION_S": _KNOB,
    "RS_WORKER_INSTANCE_ID": "per pod: its default (host-pid-random) is the only right value",
    "RS_WORKER_MAX_IN_FLIGHT": _KNOB,
    "RS_WORKER_STORE_ARTIFACTS": _KNOB,
    "RS_WORKER_TRANSACTION_TIMEOUT_MS": _KNOB,
}
_VARIABLE = re.compile(rf"\b{ENV_PREFIX}[A-Z0-9_]+\b")
#: Template comments (``{{/* */}}``, ``{{- /* */ -}}``) and YAML ones: a name a comment mentions is not set.
_COMMENT = re.compile(r"\{\{-?\s*/\*.*?\*/\s*-?\}\}|^\s*#.*$", re.DOTALL | re.MULTILINE)


def chart_variables(templates: Path) -> set[str]:
    """Every ``RS_*`` name a template writes (rendered or not under the given values), comments aside."""
    texts = (_COMMENT.sub("", path.read_text()) for path in sorted(templates.glob("*")))
    return {name for text in texts for name in _VARIABLE.findall(text)}


def deployment_settings() -> set[str]:
    """The variables of every setting of ``GROUPS`` and of the top-level ones (the task registry's)."""
    names = {ENV_PREFIX + flat.upper() for flat, (group, _) in flat_names().items() if group in GROUPS}
    top = [name for name, info in Settings.model_fields.items() if name not in GROUPS and name != "local"]
    return names | {env_name(name) for name in top}


def reserved_in_schema(schema: Path) -> set[str]:
    """The names the values schema refuses in ``settings:``."""
    settings = json.loads(schema.read_text())["properties"]["settings"]
    return set(settings["propertyNames"]["not"]["enum"])


def problems(chart: Path) -> list[str]:
    """What is unaccounted for: a setting neither written nor listed, a listed one written or gone, and a
    mismatch between what the templates write and what the schema keeps out of ``settings:``."""
    written, known = chart_variables(chart / "templates"), deployment_settings()
    out = [f"{name}: set by no template and not in LEFT_TO_SETTINGS (infra/helm/settings_coverage.py)"
           for name in sorted(known - written - LEFT_TO_SETTINGS.keys())]  # fmt: skip
    out += [f"{name}: in LEFT_TO_SETTINGS but a template sets it" for name in sorted(written & LEFT_TO_SETTINGS.keys())]
    out += [f"{name}: in LEFT_TO_SETTINGS but no such setting" for name in sorted(LEFT_TO_SETTINGS.keys() - known)]
    reserved = reserved_in_schema(chart / "values.schema.json")
    out += [f"{name}: a template sets it, yet values.schema.json lets settings: set it too"
            for name in sorted(written - reserved)]  # fmt: skip
    out += [f"{name}: values.schema.json keeps it out of settings:, yet no template sets it"
            for name in sorted(reserved - written)]  # fmt: skip
    return out

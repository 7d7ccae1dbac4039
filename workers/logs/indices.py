"""Where log records live in OpenSearch: daily indices, their template, and retention.

Why daily indices named from the record's own ``created_at`` instead of an ISM rollover alias: a record
re-delivered by Kafka (after a crash or an OpenSearch outage) must land on the *same* document, or it is
indexed twice. A rollover alias would send the second delivery to a newer index; a name derived from the
record never does. Retention is then "delete indices older than N days": done by ISM when the
index-management plugin is installed (the policy below), else by ``delete_expired`` that the indexer runs
periodically. The local OpenSearch (integ-test-zip) has no plugins, so the fallback is what runs locally.

The size cap ("delete the oldest days while the prefix's total store size is over N bytes") is always the
indexer's sweep (``over_size``), ISM or not: ISM's only size condition, ``min_size``, looks at one index, never
at the total of a prefix, so it cannot say "keep the newest days that fit".
"""

from __future__ import annotations

import contextlib
import json
import re
from datetime import UTC, date, datetime, timedelta
from importlib import resources
from typing import Any

from schemas.errors import RewardstreamError

_DATE_SUFFIX = re.compile(r"-(\d{4})\.(\d{2})\.(\d{2})$")
ISM_PLUGIN = "opensearch-index-management"


class IndexSetupError(RewardstreamError):
    """The index template or retention policy could not be installed."""


def _load(name: str) -> dict[str, Any]:
    text = resources.files("workers.logs").joinpath(name).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def index_template(prefix: str, replicas: int) -> dict[str, Any]:
    """The composable index template body for ``<prefix>-*``."""
    body = _load("index_template.json")
    body["index_patterns"] = [f"{prefix}-*"]
    body["template"]["settings"]["index"]["number_of_replicas"] = replicas
    return body


def ism_policy(prefix: str, retention_days: int) -> dict[str, Any]:
    """The ISM policy body: delete ``<prefix>-*`` indices once older than the retention."""
    body = _load("ism_policy.json")
    policy = body["policy"]
    policy["states"][0]["transitions"][0]["conditions"]["min_index_age"] = f"{retention_days}d"
    policy["ism_template"][0]["index_patterns"] = [f"{prefix}-*"]
    return body


def index_name(prefix: str, created_at: datetime) -> str:
    """The daily index a record belongs to, from its own UTC timestamp (stable across re-deliveries)."""
    return f"{prefix}-{created_at.astimezone(UTC):%Y.%m.%d}"


def index_day(prefix: str, index: str) -> date | None:
    """The day of a daily index of ``prefix``, or None if ``index`` is not one."""
    if not index.startswith(f"{prefix}-"):
        return None
    match = _DATE_SUFFIX.search(index)
    if match is None or len(index) != len(prefix) + 11:
        return None
    try:
        return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return None


def expired(prefix: str, indices: list[str], retention_days: int, today: date) -> list[str]:
    """Daily indices of ``prefix`` whose day is more than ``retention_days`` before ``today``."""
    cutoff = today - timedelta(days=retention_days)
    return sorted(i for i in indices if (day := index_day(prefix, i)) is not None and day < cutoff)


def over_size(prefix: str, sizes: dict[str, int], max_bytes: int, today: date) -> list[str]:
    """The oldest daily indices of ``prefix`` to delete so that the total of ``sizes`` (every index of the
    prefix, in bytes) is at most ``max_bytes``; today's index (and any later one) is never chosen."""
    if max_bytes <= 0:
        return []
    total = sum(sizes.values())
    days = sorted((day, name) for name in sizes if (day := index_day(prefix, name)) is not None and day < today)
    doomed: list[str] = []
    for _day, name in days:
        if total <= max_bytes:
            break
        doomed.append(name)
        total -= sizes[name]
    return doomed


class LogIndices:
    """Installs the template (and the ISM policy when possible) and applies retention for one prefix."""

    def __init__(self, client: Any, prefix: str, *, replicas: int, retention_days: int, max_bytes: int = 0) -> None:
        self._client = client
        self.prefix = prefix
        self.replicas = replicas
        self.retention_days = retention_days
        self.max_bytes = max_bytes
        self.ism_enabled = False

    @property
    def template_name(self) -> str:
        """Name of the index template (and of the ISM policy)."""
        return f"{self.prefix}-template"

    @property
    def policy_id(self) -> str:
        """Id of the ISM retention policy."""
        return f"{self.prefix}-retention"

    def install(self) -> None:
        """Put the template; put the ISM policy if the plugin is there. Idempotent."""
        try:
            self._client.indices.put_index_template(
                name=self.template_name, body=index_template(self.prefix, self.replicas)
            )
            self.ism_enabled = self._has_ism()
            if self.ism_enabled:
                self._put_policy()
        except Exception as exc:
            raise IndexSetupError(f"cannot install the log index template {self.template_name}: {exc}") from exc

    def _has_ism(self) -> bool:
        plugins = self._client.cat.plugins(format="json")
        return any(p.get("component") == ISM_PLUGIN for p in plugins)

    def _put_policy(self) -> None:
        from opensearchpy.exceptions import ConflictError, NotFoundError

        path = f"/_plugins/_ism/policies/{self.policy_id}"
        body = ism_policy(self.prefix, self.retention_days)
        try:
            current = self._client.transport.perform_request("GET", path)
        except NotFoundError:
            current = None
        params = {}
        if current is not None:
            params = {"if_seq_no": current["_seq_no"], "if_primary_term": current["_primary_term"]}
        with contextlib.suppress(ConflictError):  # another indexer put the same body concurrently
            self._client.transport.perform_request("PUT", path, params=params, body=body)

    def delete_expired(self, today: date | None = None) -> list[str]:
        """Delete daily indices past retention (the no-ISM fallback); returns what was deleted."""
        if self.ism_enabled:
            return []
        day = today or datetime.now(UTC).date()
        names = list(self._client.indices.get(index=f"{self.prefix}-*", expand_wildcards="open,closed"))
        doomed = expired(self.prefix, names, self.retention_days, day)
        self._delete(doomed)
        return doomed

    def delete_over_size(self, today: date | None = None) -> list[str]:
        """Delete the oldest daily indices while the prefix's total store size is over ``max_bytes`` (with or
        without ISM: it has no total-size condition); returns what was deleted."""
        if self.max_bytes <= 0:
            return []
        day = today or datetime.now(UTC).date()
        doomed = over_size(self.prefix, self.store_sizes(), self.max_bytes, day)
        self._delete(doomed)
        return doomed

    def sweep(self, today: date | None = None) -> list[str]:
        """Both retention rules, age first (what the indexer runs periodically); returns what was deleted."""
        return self.delete_expired(today) + self.delete_over_size(today)

    def store_sizes(self) -> dict[str, int]:
        """Each index of the prefix and its store size in bytes, replicas included (a closed index: 0)."""
        rows = self._client.cat.indices(
            index=f"{self.prefix}-*", format="json", bytes="b", h="index,store.size", expand_wildcards="open,closed"
        )
        return {row["index"]: int(row.get("store.size") or 0) for row in rows}

    def _delete(self, names: list[str]) -> None:
        for name in names:  # one by one: destructive_requires_name forbids wildcards
            self._client.indices.delete(index=name, ignore_unavailable=True)

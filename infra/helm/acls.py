"""``python -m infra.helm.acls``: the Kafka ACL rows a Helm release's principals need, for the cluster's operator.

Why here: ``rewardstream up`` writes the ACL table of ``schemas.kafka_acls`` itself, but a production cluster is
someone else's; the chart's pods run as the principals that table names (``credentials.kafkaPrincipals``), with
one difference: the reward processor's app id is per release (``roles.rewardProcessor.appId``, default
``<release>-rewards``), not ``<prefix>rewards``. This prints the same table for the release's prefix and app id,
as markdown (what docs/operations.md shows) or as ``kafka-acls`` commands to run as the cluster's admin.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys

from schemas.kafka_acls import Grant, acl_table, trainer_names

#: ``kafka-acls`` spells each operation and resource this way.
_OPERATION = {"read": "Read", "write": "Write", "create": "Create", "describe": "Describe",
              "describe_configs": "DescribeConfigs", "delete": "Delete"}  # fmt: skip
_RESOURCE = {"topic": "--topic", "group": "--group", "transactional_id": "--transactional-id"}


def command(grant: Grant, bootstrap: str, config: str) -> str:
    """One grant as a ``kafka-acls`` invocation (quoted for a POSIX shell)."""
    args = ["kafka-acls.sh", "--bootstrap-server", bootstrap, "--command-config", config, "--add",
            "--allow-principal", f"User:{grant.principal}", "--operation", _OPERATION[grant.operation],
            _RESOURCE[grant.resource], grant.name]  # fmt: skip
    if grant.pattern == "prefixed":
        args += ["--resource-pattern-type", "prefixed"]
    return shlex.join(args)


def renamed(grants: tuple[Grant, ...], names: list[str]) -> tuple[Grant, ...]:
    """The grants with principals renamed (``PRINCIPAL=USERNAME``: a username given in
    ``credentials.kafkaPrincipals``); a new name that is another principal's is refused (it would merge rights)."""
    taken = {grant.principal for grant in grants}
    rename: dict[str, str] = {}
    for item in names:
        old, sep, new = item.partition("=")
        if not sep or not old or not new or any(c.isspace() or c in ",=" for c in new):
            raise ValueError(f"--principal {item!r}: expected PRINCIPAL=USERNAME (e.g. indexer=indexer-prod)")
        if old not in taken:
            raise ValueError(f"--principal {item!r}: {old!r} is no principal of the table")
        if new in taken:
            raise ValueError(f"--principal {item!r}: {new!r} is another principal of the table (its rights too)")
        rename[old] = new
    return tuple(dataclasses.replace(g, principal=rename.get(g.principal, g.principal)) for g in grants)


def main(argv: list[str] | None = None) -> int:
    """Print the table (or the commands); exit 2 on a bad trainer name or rename."""
    parser = argparse.ArgumentParser(prog="python -m infra.helm.acls", description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", default="rs.", help="kafka.topicPrefix (default rs.)")
    parser.add_argument("--release", default="rs", help="the Helm release name (the app id's default)")
    parser.add_argument("--app-id", default="", help="roles.rewardProcessor.appId (default <release>-rewards)")
    parser.add_argument("--trainers", default="trainer", help="the trainer principals, comma-separated")
    parser.add_argument(
        "--principal",
        action="append",
        default=[],
        metavar="PRINCIPAL=USERNAME",
        help="a principal under another username (credentials.kafkaPrincipals.<role>.username)",
    )
    parser.add_argument("--format", choices=("markdown", "kafka-acls"), default="markdown")
    parser.add_argument("--bootstrap", default="<bootstrap>", help="kafka-acls: --bootstrap-server")
    parser.add_argument("--command-config", default="admin.properties", help="kafka-acls: the admin's client file")
    args = parser.parse_args(argv)
    try:
        grants = renamed(acl_table(args.prefix, trainer_names(args.trainers), args.app_id or f"{args.release}-rewards"),
                         args.principal)  # fmt: skip
    except ValueError as exc:
        print(f"acls: {exc}", file=sys.stderr)
        return 2
    if args.format == "markdown":
        rows = ["| principal | may | resource | name |", "|---|---|---|---|", *(grant.row() for grant in grants)]
        sys.stdout.write("\n".join(rows) + "\n")
    else:
        for grant in grants:
            print(command(grant, args.bootstrap, args.command_config))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`connections list` and `connections revoke`: operators' controls over every user's connections
(service/flow/operator.py; docs/admin.md), run on a runtime like a replica's."""

from __future__ import annotations

import argparse
import datetime
from typing import TYPE_CHECKING, Any

from service.flow.operator import DEFAULT_REVOKE_CONCURRENCY, DEFAULT_REVOKE_RATE
from service.observability.logs import escape_control_characters
from service.ops.cli.preamble import (
    EXIT_USAGE,
    CommandFailed,
    Subcommands,
    add_command,
    add_group,
    cli_actor,
    on_runtime,
    say,
    say_json,
)

if TYPE_CHECKING:
    from service.runtime import Runtime

COLUMNS = ("sub", "iss", "provider", "account", "account_label", "scopes", "status", "updated_at")


def table(rows: list[dict[str, Any]]) -> list[str]:
    """`rows` as aligned columns under a header line; each cell escaped as `say` escapes a line,
    before the widths are measured."""
    cells = [
        [
            escape_control_characters(
                " ".join(row[c]) if c == "scopes" else _iso(row[c]) if c == "updated_at" else str(row[c])
            )
            for c in COLUMNS
        ]
        for row in rows
    ]
    widths = [max([len(c), *(len(line[i]) for line in cells)]) for i, c in enumerate(COLUMNS)]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [list(COLUMNS), *cells]
    ]


def _iso(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).isoformat(timespec="seconds")


def cmd_connections_list(args: argparse.Namespace) -> int:
    async def act(runtime: Runtime) -> int:
        rows = await runtime.operator.list_connections(
            cli_actor(), sub=args.user, iss=args.iss, provider=args.provider
        )
        if args.json:
            say_json(rows)
        else:
            say(*table(rows), f"{len(rows)} connection(s)")
        return 0

    return on_runtime(args, act, resolve_providers_first=False)


def cmd_connections_revoke(args: argparse.Namespace) -> int:
    if args.all == (args.user is not None):
        raise CommandFailed("give either --user SUB or --provider P --all", EXIT_USAGE)
    if args.all and args.provider is None:
        raise CommandFailed("--all needs --provider P", EXIT_USAGE)
    if args.dry_run and not args.all:
        raise CommandFailed("--dry-run goes with --provider P --all", EXIT_USAGE)

    async def act(runtime: Runtime) -> int:
        operator = runtime.operator
        if args.all:
            counted = await operator.revoke_provider(cli_actor(), args.provider, dry_run=True)
            say(f"{counted.matched} connection(s) at {args.provider}")
            if args.dry_run:
                return 0
            removal = await operator.revoke_provider(
                cli_actor(), args.provider, rate=args.rate, concurrency=args.concurrency
            )
        else:
            removal = await operator.revoke_user(cli_actor(), args.user, iss=args.iss, provider=args.provider)
        if args.json:
            say_json(removal.summary())
            return 0
        for row in removal.deleted:
            confirmed = "revoked at the provider" if row["revoked"] else "NOT confirmed by the provider"
            who = f"{row['sub']} {row['provider']} {row['account']} ({row['account_label']})"
            say(f"deleted {who}: {confirmed}")
        say(
            f"{len(removal.deleted)} deleted, {removal.revoked} revoked at the provider, "
            f"{removal.flows_ended} flow(s) in progress ended"
        )
        return 0

    return on_runtime(args, act, resolve_providers_first=not args.dry_run)


def add_parsers(sub: Subcommands) -> None:
    connections = add_group(sub, "connections", "every user's connections (operators)")
    listing = add_command(connections, "list", cmd_connections_list, "one row per connection, never a secret")
    listing.add_argument("--user", metavar="SUB", default=None)
    listing.add_argument("--iss", default=None)
    listing.add_argument("--provider", metavar="P", default=None)
    listing.add_argument("--json", action="store_true")
    revoking = add_command(
        connections,
        "revoke",
        cmd_connections_revoke,
        "delete connections here, then revoke them at the provider (RFC 7009)",
    )
    revoking.add_argument("--user", metavar="SUB", default=None)
    revoking.add_argument("--iss", default=None, help="the user's issuer (default: MCPUC_AUTH_ISSUER)")
    revoking.add_argument("--provider", metavar="P", default=None)
    revoking.add_argument("--all", action="store_true", help="every connection at --provider (incident)")
    revoking.add_argument("--dry-run", action="store_true", help="with --all: count only")
    revoking.add_argument(
        "--rate", type=float, default=DEFAULT_REVOKE_RATE, help="revocations per second (with --all)"
    )
    revoking.add_argument("--concurrency", type=int, default=DEFAULT_REVOKE_CONCURRENCY)
    revoking.add_argument("--json", action="store_true")

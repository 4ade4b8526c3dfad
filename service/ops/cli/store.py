"""`store migrate` and `store copy-from`: the store's schema, and moving to another Redis layout."""

from __future__ import annotations

import argparse
import os

from service.ops.cli.preamble import (
    EXIT_USAGE,
    CommandFailed,
    Subcommands,
    add_command,
    add_group,
    configuration_error,
    configured,
    keyring_of,
    opened_store,
    run,
    say,
)


def cmd_store_migrate(args: argparse.Namespace) -> int:
    """Bring the store's schema up to date, as the server would when it opens the store; for a
    deployment whose replicas connect with a role that may not change the schema (docs/postgres.md).
    MCPUC_STORE_URL then names the schema's owner for this command only."""
    settings = configured(args)

    async def migrate() -> None:
        async with opened_store(settings):
            pass  # opening it is the migration

    run(migrate())
    say("store schema is up to date")
    return 0


def cmd_store_copy_from(args: argparse.Namespace) -> int:
    """Copy the connections of another store (the URL in the environment variable `--from-env`,
    never on the command line: it may hold a password) into MCPUC_STORE_URL's, never bringing
    back a connection either store deleted (token_store/store_copy.py): moving a deployment to
    another store (docs/redis.md, "Moving to another store"). Run it before and again after the
    replicas switch."""
    from token_store import CopyWindowClosed, copy_between

    settings = configured(args)
    source_url = os.environ.get(args.from_env, "")
    if not source_url:
        raise CommandFailed(f"store copy-from needs the old store's URL in {args.from_env}", EXIT_USAGE)
    try:
        settings.require_tls_to_redis(source_url, args.from_env)  # as MCPUC_STORE_URL's
    except ValueError as exc:
        raise configuration_error(exc) from None
    copy = copy_between(
        source_url,
        settings.effective_store_url,
        keyring_of(settings),
        prefix=settings.redis_prefix,
        new_window=args.new_window,
        allow_plaintext_redis=settings.allow_plaintext_redis,
    )
    try:
        report = run(copy)
    except ValueError as exc:  # a URL that names no store
        raise configuration_error(exc) from None
    except CopyWindowClosed as exc:
        raise CommandFailed(str(exc)) from None
    say(*report.summary().splitlines())
    return 0


def add_parsers(sub: Subcommands) -> None:
    store = add_group(sub, "store", "store maintenance")
    add_command(
        store, "migrate", cmd_store_migrate, "create or upgrade the store's schema (docs/postgres.md)"
    )
    copy_from = add_command(
        store,
        "copy-from",
        cmd_store_copy_from,
        "copy another store's connections into this one, deletions kept (docs/redis.md)",
    )
    copy_from.add_argument(
        "--from-env", default="MCPUC_OLD_STORE_URL", help="variable holding the old store's URL"
    )
    copy_from.add_argument(
        "--new-window",
        action="store_true",
        help="open a new copy window (a store that served until now only, never one left behind)",
    )

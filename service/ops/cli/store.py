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
    """Copy the connections of another Redis store (the URL in the environment variable
    `--from-env`, never on the command line: it may hold a password) into MCPUC_STORE_URL's, in
    its layout: moving a single primary's deployment to Redis Cluster (docs/redis.md, "Moving to
    Cluster"). Run it before and again after the replicas switch; it never overwrites a newer
    connection."""
    from token_store import RedisStore

    settings = configured(args)
    source_url = os.environ.get(args.from_env, "")
    if not settings.uses_redis or not source_url.lower().startswith(("redis://", "rediss://", "redis+")):
        raise CommandFailed(
            "store copy-from needs a Redis MCPUC_STORE_URL and a Redis URL in " + args.from_env, EXIT_USAGE
        )

    async def copy() -> int:
        keyring = keyring_of(settings)
        source = await RedisStore.open(source_url, keyring, prefix=settings.redis_prefix)
        try:
            async with opened_store(settings, keyring) as target:
                assert isinstance(target, RedisStore)
                return await target.copy_connections_from(source)
        finally:
            await source.close()

    try:
        count = run(copy())
    except ValueError as exc:
        raise CommandFailed(str(exc)) from None
    say(f"copied {count} connection(s)")
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
        "copy another Redis store's connections into this one (docs/redis.md)",
    )
    copy_from.add_argument(
        "--from-env", default="MCPUC_OLD_STORE_URL", help="variable holding the old store's URL"
    )

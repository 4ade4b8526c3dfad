"""`keys rotate` and `keys retire`: the encryption keys of the store's secrets
(docs/configuration.md, "Rotating the encryption key")."""

from __future__ import annotations

import argparse

from service.ops.cli.preamble import (
    CommandFailed,
    add_config_option,
    configured,
    keyring_of,
    opened_store,
    run,
    say,
)


def cmd_keys_rotate(args: argparse.Namespace) -> int:
    """Re-encrypt every record under the newest key, while the replicas serve."""
    settings = configured(args)

    async def rotate() -> int:
        async with opened_store(settings) as store:
            return await store.reencrypt_all()

    say(f"re-encrypted {run(rotate())} record(s) under the newest key")
    return 0


def cmd_keys_retire(args: argparse.Namespace) -> int:
    """Refuse while any record is sealed under KID: removing that key would strand it (a token
    set that can no longer be read can no longer be revoked at its provider)."""
    settings = configured(args)
    keyring = keyring_of(settings)
    if args.kid == keyring.primary_kid:
        raise CommandFailed(f"{args.kid!r} is the primary key; add a newer key first")

    async def count() -> int:
        async with opened_store(settings, keyring) as store:
            return await store.count_sealed_under(args.kid)

    sealed = run(count())
    # mutant: keys.retire_only_unused
    if sealed:
        raise CommandFailed(
            f"{sealed} record(s) are sealed only under {args.kid!r}; run `mcp-url-connect keys rotate` first"
        )
    say(f"no record is sealed under {args.kid!r}: remove it from MCPUC_ENCRYPTION_KEYS")
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    keys = sub.add_parser("keys", help="encryption key maintenance")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    rotate = keys_sub.add_parser("rotate", help="re-encrypt every record under the newest key (online)")
    add_config_option(rotate)
    rotate.set_defaults(func=cmd_keys_rotate)

    retire = keys_sub.add_parser("retire", help="check that no record is sealed only under KID")
    retire.add_argument("kid")
    add_config_option(retire)
    retire.set_defaults(func=cmd_keys_retire)

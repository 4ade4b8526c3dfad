"""`keys rotate` and `keys retire`: the encryption keys of the store's secrets
(docs/configuration.md, "Rotating the encryption key")."""

from __future__ import annotations

import argparse

from service.ops.cli.preamble import (
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


def cmd_keys_rotate(args: argparse.Namespace) -> int:
    """Re-encrypt every record under the newest key, while the replicas serve."""
    settings = configured(args)

    async def rotate() -> int:
        async with opened_store(settings) as store:
            return await store.reencrypt_all() + await store.reencrypt_client_registrations()

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
            sealed = await store.count_sealed_under(args.kid)
            return sealed + await store.count_client_registrations_sealed_under(args.kid)

    sealed = run(count())
    # mutant: keys.retire_only_unused
    if sealed:
        raise CommandFailed(
            f"{sealed} record(s) are sealed only under {args.kid!r}; run `mcp-url-connect keys rotate` first"
        )
    say(f"no record is sealed under {args.kid!r}: remove it from MCPUC_ENCRYPTION_KEYS")
    return 0


def add_parsers(sub: Subcommands) -> None:
    keys = add_group(sub, "keys", "encryption key maintenance")
    add_command(keys, "rotate", cmd_keys_rotate, "re-encrypt every record under the newest key (online)")
    retire = add_command(keys, "retire", cmd_keys_retire, "check that no record is sealed only under KID")
    retire.add_argument("kid")

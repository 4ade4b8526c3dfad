"""What every command shares: its settings, its store or runtime opened and closed, what it prints,
and how it fails (one line on stderr and an exit code).

A command raises `CommandFailed`; `main` (service/ops/cli/__init__.py) prints it and exits with its
code. Exit codes: 0 done, 1 the command failed (the store is unreachable, a port is taken, what
was asked is refused), 2 the command cannot run as asked (configuration or usage).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from service.errors import UnknownProvider
from service.observability.logs import escape_control_characters
from service.providers.catalogue import ProviderError
from service.settings import Settings, load_settings
from token_store import KeyRing, Store, StoreUnavailable, open_store

if TYPE_CHECKING:
    from service.runtime import Runtime

PROG = "mcp-url-connect"
EXIT_FAILED = 1
EXIT_USAGE = 2

T = TypeVar("T")


class CommandFailed(Exception):
    """The command stops here: `message` on stderr, after the program's name, and `exit_code`."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def configuration_error(exc: Exception) -> CommandFailed:
    """A setting, option or key that does not allow the command to run."""
    return CommandFailed(f"configuration error: {exc}", EXIT_USAGE)


def say(*lines: str) -> None:
    """Print `lines` to stdout, each a line. What a command prints holds values from outside (a
    provider's account label, a user's `sub`, an error's text): each line is printed with its
    control characters escaped, as the text log writes them (`escape_control_characters`), so no
    value can add a row or send the operator's terminal an escape sequence."""
    for line in lines:
        # mutant: cli.output_escaped "escape_control_characters(line)" -> "line"
        print(escape_control_characters(line), flush=True)


def say_json(value: object) -> None:
    """`value` as indented JSON, every character past ASCII (controls included) as a `\\u`
    escape; DEL, which JSON may leave as it is, too: valid JSON that `say` leaves unchanged."""
    say(*json.dumps(value, indent=2).replace("\x7f", "\\u007f").splitlines())


def complain(message: str) -> None:
    """One line on stderr, after the program's name (escaped as `say` escapes)."""
    print(f"{PROG}: {escape_control_characters(message)}", file=sys.stderr)


Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Command = Callable[[argparse.Namespace], int]


def add_group(sub: Subcommands, name: str, help: str) -> Subcommands:
    """A command group (`keys`, `connections`...), whose commands are added to what it returns."""
    return sub.add_parser(name, help=help).add_subparsers(dest=f"{name}_command", required=True)


def add_command(
    sub: Subcommands, name: str, command: Command, help: str, *, configured: bool = True
) -> argparse.ArgumentParser:
    """The parser of one command that runs `command`; a `configured` command takes `--config`
    (it runs on the settings `serve` runs on)."""
    parser = sub.add_parser(name, help=help)
    if configured:
        parser.add_argument(
            "--config", type=Path, default=None, help="TOML settings file (MCPUC_CONFIG_FILE)"
        )
    parser.set_defaults(func=command)
    return parser


def configured(args: argparse.Namespace) -> Settings:
    """The settings `serve` runs on (`--config`, MCPUC_*), checked as `serve` checks them."""
    try:
        return load_settings(config_file=args.config).require_safe_to_serve()
    except ValueError as exc:  # SettingsError, or a key that does not parse
        raise configuration_error(exc) from None


def keyring_of(settings: Settings) -> KeyRing:
    try:
        return KeyRing.parse(settings.encryption_keys)
    except ValueError as exc:
        raise configuration_error(exc) from None


def run(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` to its end. A store that cannot be reached fails the command (exit 1), a provider
    that is not configured too (exit 2): raised as they are, or inside the group a task group
    raises (`Runtime.running` runs the command in one)."""
    try:
        return asyncio.run(work)
    except* StoreUnavailable as unavailable:
        raise CommandFailed(_first(unavailable)) from None
    except* UnknownProvider as unknown:
        raise CommandFailed(_first(unknown), EXIT_USAGE) from None


def _first(group: BaseExceptionGroup[BaseException]) -> str:
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return str(leaf)


@asynccontextmanager
async def opened_store(settings: Settings, keyring: KeyRing | None = None) -> AsyncIterator[Store]:
    """The configured store, opened as the server opens it (its schema brought up to date), closed
    at the end."""
    store = await open_store(
        settings.effective_store_url,
        keyring or keyring_of(settings),
        prefix=settings.redis_prefix,
        allow_plaintext_redis=settings.allow_plaintext_redis,
    )
    try:
        yield store
    finally:
        await store.close()


async def resolve_providers(settings: Settings) -> Settings:
    """Fill providers' endpoints from their discovery metadata and make each remote MCP server a
    provider (`service.runtime.resolve_providers`); refuse to start if it fails. The store is
    opened only when a remote MCP server may need a dynamic registration kept there."""
    from service.runtime import resolve_providers as resolve_all
    from service.runtime import start_up_outbound

    outbound = start_up_outbound(settings.http_timeout)
    try:
        if not any(p.kind == "mcp" and not p.client_id for p in settings.providers.values()):
            return await resolve_all(settings, outbound.client, _NoRegistrations())
        store = await open_store(
            settings.effective_store_url,
            keyring_of(settings),
            prefix=settings.redis_prefix,
            wait_replicas=settings.store_wait_replicas,
            wait_timeout=settings.store_wait_timeout,
            allow_plaintext_redis=settings.allow_plaintext_redis,
        )
        try:
            return await resolve_all(settings, outbound.client, store)
        finally:
            await store.close()
    finally:
        await outbound.aclose()


class _NoRegistrations:
    """Registrations for a configuration that needs none (every remote MCP server pre-registered)."""

    async def get_client_registration(self, issuer: str, redirect_uri: str) -> None:
        raise ProviderError("no store opened for a dynamic registration")

    async def add_client_registration(self, registration: Any) -> Any:
        raise ProviderError("no store opened for a dynamic registration")

    async def remove_client_registration(self, issuer: str, redirect_uri: str, client_id: str) -> bool:
        raise ProviderError("no store opened for a dynamic registration")


def on_runtime(
    args: argparse.Namespace, act: Callable[[Runtime], Awaitable[int]], *, resolve_providers_first: bool
) -> int:
    """Run `act` on a runtime built from the same configuration as `serve` (--config, MCPUC_*):
    the same store, providers and completion bus, so sessions on the replicas hear of it. The
    replicas send webhooks and sweep; a command only acts."""
    from service.runtime import Runtime

    settings = configured(args)
    try:
        if resolve_providers_first:
            settings = asyncio.run(resolve_providers(settings))
        runtime = Runtime(settings)
    except ValueError as exc:  # a provider's discovery failed, a malformed key
        raise configuration_error(exc) from None
    runtime.run_sweeps = False

    async def acting() -> int:
        async with runtime.running():
            return await act(runtime)

    return run(acting())


def cli_actor() -> str:
    """Who acts, in the audit log: the operating-system user running the command."""
    return f"cli:{getpass.getuser()}"

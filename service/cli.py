"""Console entry point: `mcp-url-connect demo | serve | dev-token`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import httpx
import uvicorn
from starlette.types import ASGIApp

from service.providers import ProviderError, resolve_discovery
from service.redaction import configure_logging
from service.settings import Settings, SettingsError, load_settings

DEFAULT_DATA_DIR = Path(".mcp-url-connect")


def _server(app: ASGIApp, host: str, port: int) -> uvicorn.Server:
    # log_config=None: uvicorn's loggers propagate to our root handler and its redacting filter.
    return uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_config=None, lifespan="on"))


async def _serve_all(servers: list[uvicorn.Server]) -> None:
    await asyncio.gather(*(s.serve() for s in servers))


def cmd_demo(args: argparse.Namespace) -> int:
    from mock_providers import create_mock_providers_app
    from mock_providers.demo import banner, build_demo
    from service.app import create_app

    configure_logging(args.log_level)
    providers_port = args.providers_port or args.port + 1
    try:
        demo = build_demo(args.host, args.port, providers_port, args.data_dir)
    except SettingsError as exc:
        print(f"mcp-url-connect: {exc} (the demo runs on a loopback host only)", file=sys.stderr)
        return 2
    print(banner(demo), flush=True)
    servers = [
        _server(create_mock_providers_app(demo.providers), args.host, providers_port),
        _server(create_app(demo.settings), args.host, args.port),
    ]
    asyncio.run(_serve_all(servers))
    return 0


async def resolve_providers(settings: Settings) -> Settings:
    """Fill providers' endpoints from their discovery metadata; refuse to start if it fails."""
    async with httpx.AsyncClient(timeout=settings.http_timeout, follow_redirects=False) as http:
        providers = {name: await resolve_discovery(p, http) for name, p in settings.providers.items()}
    return replace(settings, providers=providers)


def cmd_serve(args: argparse.Namespace) -> int:
    from service.app import create_app

    try:
        settings = asyncio.run(resolve_providers(load_settings(config_file=args.config).validate()))
    except (SettingsError, ProviderError) as exc:
        print(f"mcp-url-connect: configuration error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    asyncio.run(_serve_all([_server(create_app(settings), settings.host, settings.port)]))
    return 0


def cmd_mock_providers(args: argparse.Namespace) -> int:
    from mock_providers import create_mock_providers_app
    from mock_providers.demo import build_dev_setup, write_serve_env

    configure_logging(args.log_level)
    public_url = args.public_url or f"http://{args.host}:{args.port}"
    setup = build_dev_setup(args.mcp_public_url, public_url, args.data_dir)
    env_file = write_serve_env(setup)
    print(
        f"mock providers (development only): dev AS {public_url}, mockhub {public_url}/mockhub\n"
        f"configuration for `mcp-url-connect serve` replicas: {env_file} (secrets, mode 0600)",
        flush=True,
    )
    asyncio.run(_serve_all([_server(create_mock_providers_app(setup.providers), args.host, args.port)]))
    return 0


def cmd_keys_rotate(args: argparse.Namespace) -> int:
    from token_store import KeyRing, open_store

    try:
        settings = load_settings(config_file=args.config).validate()
    except SettingsError as exc:
        print(f"mcp-url-connect: configuration error: {exc}", file=sys.stderr)
        return 2

    async def rotate() -> int:
        store = await open_store(
            settings.effective_store_url,
            KeyRing.parse(settings.encryption_keys),
            prefix=settings.redis_prefix,
        )
        try:
            return await store.reencrypt_all()
        finally:
            await store.close()

    count = asyncio.run(rotate())
    print(f"re-encrypted {count} record(s) under the newest key")
    return 0


def cmd_dev_token(args: argparse.Namespace) -> int:
    from mock_providers import NoDevKeys, mint_access_token

    try:
        print(mint_access_token(args.data_dir, args.sub))
    except NoDevKeys as exc:
        print(f"mcp-url-connect: {exc}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcp-url-connect", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the whole flow locally: MCP server, dev AS, mock provider")
    demo.add_argument("--host", default="127.0.0.1")
    demo.add_argument("--port", type=int, default=8000)
    demo.add_argument("--providers-port", type=int, default=0, help="dev AS + mockhub port (default PORT+1)")
    demo.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    demo.add_argument("--log-level", default="INFO")
    demo.set_defaults(func=cmd_demo)

    serve = sub.add_parser("serve", help="run the MCP server configured by MCPUC_* variables")
    serve.add_argument("--config", type=Path, default=None, help="TOML settings file (MCPUC_CONFIG_FILE)")
    serve.set_defaults(func=cmd_serve)

    mock = sub.add_parser("mock-providers", help="run the dev AS and mockhub alone (development only)")
    mock.add_argument("--host", default="127.0.0.1")
    mock.add_argument("--port", type=int, default=8001)
    mock.add_argument(
        "--public-url", default="", help="URL browsers and replicas use (default http://HOST:PORT)"
    )
    mock.add_argument("--mcp-public-url", required=True, help="public URL of the MCP server (or its proxy)")
    mock.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    mock.add_argument("--log-level", default="INFO")
    mock.set_defaults(func=cmd_mock_providers)

    keys = sub.add_parser("keys", help="encryption key maintenance")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    rotate = keys_sub.add_parser("rotate", help="re-encrypt every record under the newest key (online)")
    rotate.add_argument("--config", type=Path, default=None)
    rotate.set_defaults(func=cmd_keys_rotate)

    token = sub.add_parser("dev-token", help="print a bearer token for SUB signed by the demo's dev AS keys")
    token.add_argument("sub")
    token.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    token.set_defaults(func=cmd_dev_token)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())

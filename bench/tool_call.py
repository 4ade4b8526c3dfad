"""Latency of `whoami` with a stored token vs the token already in memory, and of the connect flow.

    .venv/bin/python -m bench.tool_call [--calls 300] [--flows 20] [--store-url URL]

`--store-url` runs the demo server on another store (`redis://…`, under a key prefix of its own,
deleted afterwards; `postgresql://…`, whose database it leaves the tables in); SQLite by default.

Everything runs on this machine over real sockets: demo server + dev AS + mockhub under uvicorn,
the SDK client, a scripted browser. Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError

from bench.processes import delete_prefix
from mock_providers.testing.browser import Browser
from mock_providers.testing.client import mcp_client
from mock_providers.testing.servers import DemoServers
from service.mcp.errors import connected
from service.mcp.identity import current_caller
from service.providers.api import fetch_userinfo
from token_store import Connection, KeyRing, UserRef, open_store


def add_in_memory_tool(app: Any) -> None:
    """`whoami_cached`: the same tool, but the connection is read from the store once, then kept."""
    runtime, server = app.state.runtime, app.state.mcp_server
    provider = runtime.settings.providers["mockhub"]
    cache: dict[str, Connection] = {}

    @server.tool()
    @connected
    async def whoami_cached(ctx: Context[Any, Any]) -> dict[str, Any]:
        user = current_caller(ctx).user
        if user.sub not in cache:
            found = await runtime.store.get_connection(user, "mockhub")
            assert found is not None
            cache[user.sub] = found
        return await fetch_userinfo(runtime.http, provider, cache[user.sub].tokens.access_token)


async def timed(n: int, op: Callable[[], Awaitable[Any]]) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await op()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def row(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"{name:<48} {len(samples):>6} {statistics.median(samples):>10.2f} {p99:>10.2f}"


async def accept(params: Any) -> str:
    return "accept"  # declares URL mode; never called on the legacy -32042 path


async def connect_flow(servers: DemoServers, user: str) -> None:
    """One legacy flow: -32042, browser login + consent, completion notification, successful retry."""
    browser = Browser()
    try:
        async with mcp_client(servers, user, "legacy", on_url=accept) as (client, recorder):
            try:
                await client.call_tool("whoami", {})
                raise RuntimeError("expected -32042")
            except MCPError as exc:
                url = UrlElicitationRequiredError.from_error(exc.error).elicitations[0].url
            await browser.complete_connect(url, username=user)
            await asyncio.wait_for(recorder.completed.wait(), 10)
            result = await client.call_tool("whoami", {})
            assert not result.is_error
    finally:
        await browser.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--flows", type=int, default=20)
    parser.add_argument("--store-url", default="")
    args = parser.parse_args()
    overrides: dict[str, Any] = {}
    if args.store_url:
        overrides = {"store_url": args.store_url, "redis_prefix": f"bench-{uuid.uuid4().hex[:12]}:"}
    with tempfile.TemporaryDirectory() as tmp:
        servers = DemoServers(Path(tmp) / "data", overrides=overrides).start()
        try:
            add_in_memory_tool(servers.apps["mcp"])
            await connect_flow(servers, "bench-user")
            async with mcp_client(servers, "bench-user", "legacy", on_url=accept) as (client, _):
                for _ in range(20):  # warm both paths
                    await client.call_tool("whoami", {})
                    await client.call_tool("whoami_cached", {})
                # Interleaved, so drift on a shared machine weighs on both alike.
                stored, cached = [], []
                for _ in range(args.calls):
                    stored += await timed(1, lambda: client.call_tool("whoami", {}))
                    cached += await timed(1, lambda: client.call_tool("whoami_cached", {}))
            # A store of this loop's own: the server's (asyncpg's pool, Redis's) belongs to its thread's loop.
            settings = servers.demo.settings
            store = await open_store(
                settings.effective_store_url,
                KeyRing.parse(settings.encryption_keys),
                prefix=settings.redis_prefix,
            )
            user = UserRef(settings.auth_issuer, "bench-user")
            try:
                direct = await timed(args.calls * 3, lambda: store.get_connection(user, "mockhub"))
            finally:
                await store.close()
            flows = []
            for i in range(args.flows):
                start = time.perf_counter()
                await connect_flow(servers, f"flow-{i}")
                flows.append((time.perf_counter() - start) * 1000)
        finally:
            servers.stop()
            if args.store_url.startswith("redis"):
                delete_prefix(overrides["redis_prefix"])
    backend = urlsplit(servers.demo.settings.effective_store_url).scheme
    print(f"store: {backend}")
    stored_minus_cached = statistics.median(stored) - statistics.median(cached)
    print(f"{'operation (ms)':<48} {'n':>6} {'median':>10} {'p99':>10}")
    print(row("whoami, token read from the store", stored))
    print(row("whoami, token already in memory", cached))
    print(row(f"store.get_connection alone ({backend} + AES-GCM)", direct))
    print(f"{'stored minus in memory (median)':<48} {'':>6} {stored_minus_cached:>10.2f}")
    print(row("whole connect flow (call, browser, notify, retry)", flows))


if __name__ == "__main__":
    asyncio.run(main())

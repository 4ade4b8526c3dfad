"""A remote MCP server's tool called through our server, against the same call made directly.

    .venv/bin/python -m bench.gateway_call [--calls 300] [--sessions 50] [--log-level INFO]

The kit's OAuth-protected MCP stand-in (mock_providers/providers/mcp_downstream) and our demo
stack run in this process, each on its own server thread with its own event loop; the clients run
on the main thread. One user connects once (the browser leg), then in alternating turns:

- direct: the SDK's client calls the stand-in's `echo` with the user's downstream token;
- proxied: the SDK's client calls our `down_echo`, which our server forwards on its pooled session;
- ours: the SDK's client calls our own `list_connections` (one store read): what one MCP request
  to our server costs without a downstream, to tell the hop's cost from the gateway's;

then the same with `slow` (the stand-in answering after `--downstream-ms`, as a server across a
network does).

Prints the latency per call (p50, p95) of each and their ratio (the goal: proxied <= 1.3x direct at
p50), and our server's CPU per proxied call (its server thread's scheduler count). Then the memory
one pooled downstream session holds: `--sessions` sessions opened in this process's pool
(service/mcp/gateway/pool.py) with tokens issued by the stand-in, measured with tracemalloc.
Logging is configured as `serve` configures it (`configure_logging`, at `--log-level`): each
server's access line and each outbound request's line cost what they cost in production, and no
library's own handler (the SDK installs a rich console handler) adds its rendering to either
path. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import accept, connect_url, mcp_client, retry
from mock_providers.testing.downstream import DownstreamServer
from mock_providers.testing.servers import DemoServers
from service.mcp.gateway.pool import DownstreamSessions
from service.observability.logs import configure_logging
from service.providers.outbound_http import OutboundHttp
from token_store import UserRef

PROVIDER = "down"
TURN = 25


def thread_cpu_ns(servers: Any) -> int:
    """CPU nanoseconds of a kit server thread (`ThreadedServers`), from the scheduler's count."""
    native = servers._threads[-1]._thread.native_id  # our server's thread (the kit's last): bench-only reach
    return int(Path(f"/proc/self/task/{native}/schedstat").read_text().split()[0])


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def latency(
    calls: int, stack: DemoServers, downstream: DownstreamServer, tool: str, arguments: dict[str, Any]
) -> None:
    async with mcp_client(stack, "alice", "legacy", on_url=accept) as (ours, _):
        await ours.list_tools()  # as a client does first: the session then hears of list changes
        token = (
            stack.apps["mcp"]
            .state.gateway.sessions.find(PROVIDER, UserRef(stack.demo.settings.auth_issuer, "alice"))
            .token.access_token
        )
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
        async with Client(streamable_http_client(downstream.url, http_client=http), mode="legacy") as direct:
            calls_of = {
                "direct": (direct, tool, arguments),
                "proxied": (ours, f"{PROVIDER}_{tool}", arguments),
                # One hop to our server and no further: a tool of ours that reads the store.
                "ours": (ours, "list_connections", {}),
            }
            timings: dict[str, list[float]] = {name: [] for name in calls_of}
            cpu = dict.fromkeys(calls_of, 0)
            done = 0
            while done < calls:
                for name, (client, name_of, args) in calls_of.items():
                    before = thread_cpu_ns(stack)
                    for _ in range(TURN):
                        started = time.perf_counter()
                        result = await client.call_tool(name_of, args)
                        timings[name].append(time.perf_counter() - started)
                        if result.is_error:
                            raise RuntimeError(f"{name} call failed: {result}")
                    cpu[name] += thread_cpu_ns(stack) - before
                done += TURN
    p50 = {name: statistics.median(values) * 1000 for name, values in timings.items()}
    print(f"== {tool}({arguments}), direct to the downstream and through our server ({done} calls each) ==")
    print(f"{'path':<10}{'p50 ms':>10}{'p95 ms':>10}{'our CPU ms':>12}")
    for name, values in timings.items():
        ours_cpu = cpu[name] / done / 1e6
        print(f"{name:<10}{p50[name]:>10.2f}{percentile(values, 0.95) * 1000:>10.2f}{ours_cpu:>12.2f}")
    print(f"proxied / direct at p50: {p50['proxied'] / p50['direct']:.2f}x (goal <= 1.3x)")
    print(
        f"our server's CPU per proxied call: {cpu['proxied'] / done / 1e6:.2f} ms (its server thread), "
        f"of which a call of our own tool costs {cpu['ours'] / done / 1e6:.2f} ms"
    )


async def connect(stack: DemoServers) -> None:
    """Alice connects her downstream account once, as a user does (the browser leg)."""
    async with Browser() as browser, mcp_client(stack, "alice", "legacy", on_url=accept) as (ours, _):
        link = await connect_url(ours, f"{PROVIDER}_echo", {"text": "x"})
        await browser.complete_connect(link.url, username="alice", login="alice-there")
        await retry(ours, link, f"{PROVIDER}_echo", {"text": "x"})


async def client_side(
    calls: int, pool: DownstreamSessions, session: Any, downstream: DownstreamServer
) -> None:
    """The client side of the downstream hop alone, on this thread (the stand-in on its own): a
    pooled session's `call_tool` (the SDK's client, our transport and bounds), against the HTTP
    exchange under it made by hand (the same tools/call POST with httpx2, no MCP client)."""
    token = session.token.access_token
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as raw:
        opened = await raw.post(downstream.url, json=RAW_INITIALIZE)
        headers = {"mcp-protocol-version": "2025-11-25"}
        if "mcp-session-id" in opened.headers:
            headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        await raw.post(
            downstream.url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )

        async def by_hand() -> None:
            answer = await raw.post(downstream.url, headers=headers, json=RAW_CALL)
            if answer.status_code != 200:
                raise RuntimeError(f"the raw call failed: {answer.status_code}")

        async def pooled() -> None:
            await pool.call_tool(session, "echo", {"text": "hello"})

        print(f"== the client side of the downstream hop, on this thread ({calls} calls each) ==")
        print(f"{'path':<28}{'CPU p50 ms':>12}")
        for name, call in (("pooled session call_tool", pooled), ("httpx2 POST by hand", by_hand)):
            cpu = []
            for _ in range(calls):
                started = time.thread_time()
                await call()
                cpu.append(time.thread_time() - started)
            print(f"{name:<28}{statistics.median(cpu) * 1000:>12.2f}")


RAW_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "b", "version": "1"},
    },
}
RAW_CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "echo", "arguments": {"text": "hello"}},
}


async def session_memory(calls: int, sessions: int, downstream: DownstreamServer) -> None:
    provider = await downstream.resolved_provider(
        DemoServers(Path(tempfile.mkdtemp())).demo.settings, PROVIDER
    )
    authorization = downstream.stand_in.authorization
    outbound = OutboundHttp(10)
    pool = DownstreamSessions(outbound)
    async with pool.running():
        users = [UserRef("https://as.example", f"user-{n}") for n in range(sessions)]
        tokens = [
            authorization._issue(provider.client_id, ["read"], downstream.url, u.sub).access_token
            for u in users
        ]
        first = await pool.open(provider, UserRef("https://as.example", "warm"), tokens[0])  # imports, pools
        await pool.list_tools(first)
        await client_side(calls, pool, first, downstream)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for user, token in zip(users, tokens, strict=True):
            await pool.list_tools(await pool.open(provider, user, token))
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    await outbound.aclose()
    print(f"== memory per pooled downstream session ({sessions} sessions, tools listed) ==")
    print(f"{(after - before) / sessions / 1024:.1f} KiB per session (Python allocations, tracemalloc)")


async def main(calls: int, sessions: int, downstream_ms: float, log_level: str) -> None:
    downstream = DownstreamServer().start()
    stack = DemoServers(Path(tempfile.mkdtemp()) / "data")
    # One user calls in a loop, far past a user's rate limit: measured here is the call, not it.
    unlimited = stack.demo.settings.replace(requests_per_second_per_user=1e6, request_burst_per_user=10**6)
    stack.demo = replace(stack.demo, settings=unlimited)
    try:
        stack.providers = {PROVIDER: await downstream.resolved_provider(stack.demo.settings, PROVIDER)}
        stack.start()
        configure_logging(log_level)  # after the SDK's servers were built: they add handlers of their own
        try:
            await connect(stack)
            await latency(calls, stack, downstream, "echo", {"text": "hello"})
            # A downstream that takes time of its own, as one across a network does.
            await latency(calls // 3, stack, downstream, "slow", {"seconds": downstream_ms / 1000})
        finally:
            stack.stop()
        await session_memory(calls, sessions, downstream)
    finally:
        downstream.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--downstream-ms", type=float, default=30.0, help="the slow downstream's own time")
    parser.add_argument("--log-level", default="INFO", help="as `serve` logs (default INFO)")
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.sessions, args.downstream_ms, args.log_level))

"""A refresh storm: N concurrent `whoami` calls over two instances, all needing a token refresh.

    .venv/bin/python -m bench.refresh_storm [--calls 50] [--rounds 5] [--singles 20]

Two MCP app instances share Redis (mock_providers/testing/replicas.py: same prefix, distinct replica
ids), with MockHub as the provider, everything over real sockets on this machine. Each storm round
marks the stored token as expired (and MockHub refuses the old one), then fires `--calls` calls at
once from 8 MCP clients (4 per instance). Compared with: one call that needs one refresh, and the
same calls with a fresh token. Also counts the refresh requests that reached MockHub (single-flight
means one per round) and MockHub's refresh-token reuse detections (should stay 0).
Needs Redis at 127.0.0.1:6379 (keys under a unique prefix, deleted afterwards). Prints a table;
asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.processes import redis_available
from mock_providers.testing.replicas import (
    REDIS_HOST,
    REDIS_PORT,
    LifecycleStack,
    connect,
    expire_stored,
    legacy_client,
    refreshes_since,
)

USER = "bench-storm"
CLIENTS_PER_INSTANCE = 4


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def row(name: str, samples: list[float], refreshes: str = "") -> str:
    ordered = sorted(samples)
    return (
        f"{name:<46} {len(samples):>6} {statistics.median(ordered):>9.2f} "
        f"{percentile(ordered, 0.99):>9.2f} {ordered[-1]:>9.2f} {refreshes:>16}"
    )


async def timed(op: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    result = await op()
    if getattr(result, "is_error", False):
        raise RuntimeError(f"tool call failed: {result}")
    return (time.perf_counter() - start) * 1000


async def run(stack: LifecycleStack, calls: int, rounds: int, singles: int) -> list[str]:
    hub = stack.mockhub
    await connect(stack.instances[0], USER)
    lines = []
    async with contextlib.AsyncExitStack() as exits, stack.store() as store:
        clients = [
            (await exits.enter_async_context(legacy_client(stack.instances[i % 2], USER)))[0]
            for i in range(2 * CLIENTS_PER_INSTANCE)
        ]

        def whoami(i: int) -> Callable[[], Awaitable[Any]]:
            return lambda: clients[i % len(clients)].call_tool("whoami", {})

        for i in range(4 * len(clients)):  # warm every client and both instances
            await whoami(i)()

        async def needing_refresh() -> None:
            await expire_stored(store, stack.user(USER), "mockhub")
            hub.expire_access_tokens()

        # One call at a time, with a fresh token and with one refresh.
        fresh_single = [await timed(whoami(i)) for i in range(singles)]
        refresh_single: list[float] = []
        mark = len(hub.token_requests)
        for i in range(singles):
            await needing_refresh()
            refresh_single.append(await timed(whoami(i)))
        single_refreshes = refreshes_since(hub.token_requests, mark)

        # N at once, with a fresh token and all needing the same refresh.
        fresh_storm: list[float] = []
        for _ in range(rounds):
            fresh_storm += await asyncio.gather(*(timed(whoami(i)) for i in range(calls)))
        storm: list[float] = []
        mark, reuse = len(hub.token_requests), hub.reuse_detections
        for _ in range(rounds):
            await needing_refresh()
            storm += await asyncio.gather(*(timed(whoami(i)) for i in range(calls)))
        storm_refreshes = refreshes_since(hub.token_requests, mark)
        reuse = hub.reuse_detections - reuse

    lines.append(f"{'operation (ms)':<46} {'n':>6} {'p50':>9} {'p99':>9} {'max':>9} {'refreshes at hub':>16}")
    lines.append(row("1 call, token fresh", fresh_single))
    lines.append(row("1 call, needing 1 refresh", refresh_single, f"{single_refreshes}/{singles} calls"))
    lines.append(row(f"{calls} concurrent calls, token fresh", fresh_storm))
    lines.append(
        row(f"{calls} concurrent calls, all needing a refresh", storm, f"{storm_refreshes}/{rounds} storms")
    )
    lines.append(
        f"storm: {calls} calls over 2 instances x {CLIENTS_PER_INSTANCE} clients, {rounds} rounds; "
        f"MockHub reuse detections: {reuse}"
    )
    return lines


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=50, help="concurrent calls per storm")
    parser.add_argument("--rounds", type=int, default=5, help="storms")
    parser.add_argument("--singles", type=int, default=20, help="single calls per single-call row")
    args = parser.parse_args()
    if not redis_available():
        print(f"Redis at {REDIS_HOST}:{REDIS_PORT} is not available", file=sys.stderr)
        return 2
    logging.disable(logging.INFO)  # servers, SDK and httpx log every request at INFO
    with tempfile.TemporaryDirectory() as tmp:
        stack = LifecycleStack(Path(tmp), http_timeout=10.0).start()
        try:
            lines = await run(stack, args.calls, args.rounds, args.singles)
        finally:
            stack.stop()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

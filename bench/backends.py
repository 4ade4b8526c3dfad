"""The token-backed call and one connect flow on each store, side by side: SQLite, Redis (one
primary), Redis Cluster (three primaries), Redis behind Sentinel (a primary, a replica, three
sentinels) and PostgreSQL, each started on loopback for the run (bench/flow.py, table `backends`).

Per store:
- `whoami` with the token read from the store and `whoami_cached` with the connection in memory
  (bench/server.py), interleaved: server CPU per call and p99 latency, and the difference (what
  the store costs a tool call);
- one connect flow (2025-11-25, new session to retry): the MCP server's CPU per flow, and the store
  operations of one flow counted in an in-process server: SQLite statements, Redis round trips
  (socket writes, a pipeline is one, pub/sub included), PostgreSQL statements sent by asyncpg.

A store whose server is missing on this machine prints "not available".
"""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from bench.flow_parts import (
    ROUNDS,
    Hops,
    counted_redis_writes,
    demo_in_process,
    one_flow,
    percentile,
    plain_flow,
    timed_calls,
)
from bench.processes import Stack, delete_prefix, redis_available
from mock_providers.testing.client import accept, mcp_client
from mock_providers.testing.replicas import REDIS_URL
from mock_providers.testing.store_servers import ClusterGroup, MissingService, PostgresServer, SentinelGroup

BACKENDS = ("SQLite", "Redis", "Redis Cluster", "Sentinel", "PostgreSQL")
PG_CALLS = ("execute", "executemany", "fetch", "fetchrow", "fetchval")


@dataclass
class Row:
    backend: str
    stored_cpu_us: float = 0.0
    cached_cpu_us: float = 0.0
    stored_p99_ms: float = 0.0
    cached_p99_ms: float = 0.0
    flow_cpu_ms: float = 0.0
    operations: str = ""
    missing: str = ""

    def line(self) -> str:
        if self.missing:
            return f"{self.backend:<14} {self.missing}"
        return (
            f"{self.backend:<14} {self.stored_cpu_us:>11.0f} {self.stored_p99_ms:>9.2f} "
            f"{self.cached_cpu_us:>11.0f} {self.cached_p99_ms:>9.2f} "
            f"{self.stored_cpu_us - self.cached_cpu_us:>12.0f} {self.flow_cpu_ms:>12.1f}  {self.operations}"
        )


HEADER = (
    f"{'store':<14} {'call CPU µs':>11} {'p99 ms':>9} {'cached µs':>11} {'p99 ms':>9} "
    f"{'stored-mem µs':>12} {'flow CPU ms':>12}  store operations per flow"
)


@contextlib.contextmanager
def backend_url(backend: str, root: Path) -> Iterator[tuple[str, str]]:
    """(store URL, what to say when it cannot run); the URL is "" for SQLite (the default)."""
    prefix = f"bench-{uuid.uuid4().hex[:12]}:"
    if backend == "SQLite":
        yield "", prefix
    elif backend == "Redis":
        if not redis_available():
            raise LookupError("not available (no Redis at 127.0.0.1:6379)")
        try:
            yield REDIS_URL, prefix
        finally:
            delete_prefix(prefix)
    elif backend == "Redis Cluster":
        with ClusterGroup(root / "redis-cluster") as cluster:
            yield cluster.url(), prefix
    elif backend == "Sentinel":
        with SentinelGroup(root / "sentinel") as group:
            yield group.url(), prefix
    else:
        with PostgresServer() as server:
            server.psql("CREATE DATABASE bench")
            yield server.url("bench"), prefix


@contextlib.contextmanager
def counted_postgres_statements() -> Iterator[list[int]]:
    """Every statement asyncpg sends through the calls the store uses."""
    counted: list[int] = []
    originals = {name: getattr(asyncpg.Connection, name) for name in PG_CALLS}

    def counting(real: Any) -> Any:
        async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            counted.append(1)
            return await real(self, *args, **kwargs)

        return call

    for name, real in originals.items():
        setattr(asyncpg.Connection, name, counting(real))
    try:
        yield counted
    finally:
        for name, real in originals.items():
            setattr(asyncpg.Connection, name, real)


async def counted_operations(
    backend: str, url: str, prefix: str, root: Path, flows: int
) -> tuple[float, str]:
    """The store operations of one flow on `backend` (the servers in this process): how many,
    and what was counted."""
    overrides: dict[str, Any] = {"store_url": url, "redis_prefix": prefix} if url else {}
    async with demo_in_process(root, overrides) as servers:
        await plain_flow(servers, "ops-warm")
        if backend == "SQLite":
            store = servers.apps["mcp"].state.runtime.store.backend
            statements: list[str] = []
            store.trace(statements.append)
            try:
                for i in range(flows):
                    await plain_flow(servers, f"ops-{i}")
            finally:
                store.trace(None)
            return len(statements) / flows, "statements (BEGIN, COMMIT included)"
        counter = counted_postgres_statements() if backend == "PostgreSQL" else counted_redis_writes()
        with counter as counted:
            for i in range(flows):
                await plain_flow(servers, f"ops-{i}")
        kind = "statements (asyncpg calls)" if backend == "PostgreSQL" else "round trips (pub/sub included)"
        return len(counted) / flows, kind


async def measure(backend: str, root: Path, calls: int, flows: int) -> Row:
    row = Row(backend)
    with contextlib.ExitStack() as stack_of:
        try:
            url, prefix = stack_of.enter_context(backend_url(backend, root / "store"))
        except (LookupError, MissingService) as exc:
            row.missing = str(exc)
            return row
        settings = {"MCPUC_STORE_URL": url, "MCPUC_REDIS_PREFIX": prefix} if url else {}
        stack = Stack(root / "server", server="bench", settings=settings).start()
        try:
            await one_flow(stack, "warm-up", stack.port, Hops())
            cpu0 = stack.cpu()
            for i in range(flows):
                await one_flow(stack, f"flow-{i}", stack.port, Hops())
            row.flow_cpu_ms = (stack.cpu() - cpu0) / flows * 1000
            async with mcp_client(stack, "warm-up", "legacy", on_url=accept) as (client, _):
                samples: dict[str, list[float]] = {"whoami": [], "whoami_cached": []}
                cpu = dict.fromkeys(samples, 0.0)
                for name in samples:  # warm-up
                    await timed_calls(stack, "server", max(5, calls // 10), _call(client, name))
                for _ in range(ROUNDS):
                    for name in samples:
                        latencies, seconds = await timed_calls(
                            stack, "server", max(1, calls // ROUNDS), _call(client, name)
                        )
                        samples[name] += latencies
                        cpu[name] += seconds
            row.stored_cpu_us = cpu["whoami"] / len(samples["whoami"]) * 1e6
            row.cached_cpu_us = cpu["whoami_cached"] / len(samples["whoami_cached"]) * 1e6
            row.stored_p99_ms = percentile(samples["whoami"], 0.99)
            row.cached_p99_ms = percentile(samples["whoami_cached"], 0.99)
        finally:
            stack.stop()
        per_flow, kind = await counted_operations(backend, url, prefix, root / "ops", max(1, flows // 2))
        row.operations = f"{per_flow:.1f} {kind}"
    return row


def _call(client: Any, tool: str) -> Any:
    return lambda: client.call_tool(tool, {})


async def backends_table(root: Path, calls: int, flows: int) -> AsyncIterator[str]:
    """The table's lines, one store at a time (each store runs alone on the machine)."""
    yield HEADER
    for backend in BACKENDS:
        with tempfile.TemporaryDirectory(dir=root) as scratch:
            yield (await measure(backend, Path(scratch), calls, flows)).line()

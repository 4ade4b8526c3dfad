"""The connect flow under load, its hops, its store operations, and the token-backed call.

    .venv/bin/python -m bench.flow            # about two minutes
    .venv/bin/python -m bench.flow --quick    # a few seconds: every table, tiny samples
    .venv/bin/python -m bench.flow --only whoami [--only store]   # some tables only

Everything runs on this machine over loopback sockets; servers are separate processes
(bench/processes.py) so their CPU time is read from /proc, apart from the client's:

1. flows/s and CPU per flow at 1, 10 and 50 parallel users, on `demo` (MCP server, dev AS and
   MockHub in one process) and on `serve` (its own process; `mock-providers` in another) with
   SQLite and with Redis (127.0.0.1:6379, a unique key prefix deleted afterwards). One flow: a
   new MCP session, the tool call answered with -32042, the browser leg, the completion
   notification, the retry. "server CPU" is the MCP server process (for `demo`, the whole
   process); the client (this process: SDK client, scripted browsers) shares the two cores.
2. the hops of one flow, timed at the client (median ms, one user at a time, `serve` + SQLite),
   and the MCP server's CPU per request, measured in the server (bench/request_cpu.py).
3. store operations per flow: SQLite statements (`set_trace_callback`, BEGIN/COMMIT included)
   and Redis round trips (socket writes; a pipeline is one), the servers in this process.
4. `whoami` with the token read from the store vs already in memory, a bare tool on our server
   vs on the SDK's bare server with the same bearer verifier (bench/server.py): latency and
   server CPU per call.
5. the token-backed call and one flow on every store side by side (bench/backends.py).

Prints tables; asserts nothing. Logging is at INFO, as `serve` runs by default.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.backends import backend_url, backends_table, counted_operations
from bench.flow_parts import ROUNDS, STATELESS, Hops, one_flow, percentile, timed_calls
from bench.processes import Stack, redis_available
from bench.request_cpu import PATH as REQUEST_CPU_PATH
from mock_providers.testing.client import accept, mcp_client
from mock_providers.testing.servers import HOST

# ---- load: parallel users --------------------------------------------------------------------


@dataclass
class LoadRow:
    topology: str
    users: int
    flows: int
    seconds: float
    server_cpu: float
    providers_cpu: float | None
    client_cpu: float
    latency_ms: list[float]

    def line(self) -> str:
        per = 1000 / self.flows
        per_core = self.flows / self.server_cpu if self.server_cpu else float("inf")
        providers = "-" if self.providers_cpu is None else f"{self.providers_cpu * per:.1f}"
        return (
            f"{self.topology:<14} {self.users:>5} {self.flows:>6} {self.flows / self.seconds:>8.1f} "
            f"{statistics.median(self.latency_ms):>10.1f} {self.server_cpu * per:>12.1f} "
            f"{providers:>14} {self.client_cpu * per:>12.1f} {per_core:>15.0f}"
        )


LOAD_HEADER = (
    f"{'topology':<14} {'users':>5} {'flows':>6} {'flows/s':>8} {'median ms':>10} "
    f"{'server CPU ms':>12} {'providers CPU':>14} {'client CPU ms':>12} {'flows/s/core*':>15}"
)
LOAD_NOTE = (
    "* what one core of the MCP server process sustains at this CPU per flow (1000 / server CPU ms):\n"
    "  the client shares this machine's cores and costs more per flow, so flows/s is bounded by it"
)


async def load(stack: Stack, topology: str, users: int, flows: int, mode: str = "legacy") -> LoadRow:
    remaining = list(range(flows))
    latencies: list[float] = []
    run = uuid.uuid4().hex[:6]

    async def user_loop() -> None:
        while remaining:
            n = remaining.pop()
            hops = Hops()
            await one_flow(stack, f"load-{run}-{n}", stack.port, hops, mode)
            latencies.extend(hops.samples["whole flow"])

    has_providers = "providers" in stack.pids
    server0, client0 = stack.cpu(), time.process_time()
    providers0 = stack.cpu("providers") if has_providers else 0.0
    start = time.perf_counter()
    await asyncio.gather(*(user_loop() for _ in range(users)))
    seconds = time.perf_counter() - start
    return LoadRow(
        topology,
        users,
        flows,
        seconds,
        stack.cpu() - server0,
        stack.cpu("providers") - providers0 if has_providers else None,
        time.process_time() - client0,
        latencies,
    )


# ---- store operations per flow ---------------------------------------------------------------


async def store_operations(root: Path, flows: int) -> list[str]:
    lines = [f"{'store':<8} {'flows':>6} {'operations per flow':>20}  counted"]
    for backend in ("SQLite", "Redis"):
        try:
            with backend_url(backend, root) as (url, prefix):
                per_flow, kind = await counted_operations(backend, url, prefix, root / backend, flows)
        except LookupError as exc:
            lines.append(f"{backend:<8} ({exc}: skipped)")
            continue
        lines.append(f"{backend:<8} {flows:>6} {per_flow:>20.1f}  {kind}")
    return lines


# ---- the token-backed call -------------------------------------------------------------------


async def whoami_table(stack: Stack, calls: int) -> list[str]:
    """`stack` runs bench/server.py (server="bench")."""
    user = "whoami-user"
    await one_flow(stack, user, stack.port, Hops())
    async with (
        mcp_client(stack, user, "legacy", on_url=accept) as (client, _),
        mcp_client(_Target(stack.data_dir, stack.sdk_url), user, "legacy") as (sdk, _),
        mcp_client(_Target(stack.data_dir, stack.sdk_resumable_url), user, "legacy") as (resumable, _),
    ):
        calls_of: dict[str, tuple[str, Callable[[], Awaitable[Any]]]] = {
            "whoami, token read from the store": ("server", lambda: client.call_tool("whoami", {})),
            "whoami_cached, connection in memory": ("server", lambda: client.call_tool("whoami_cached", {})),
            "bare tool, our server": ("server", lambda: client.call_tool("bare", {})),
            "bare tool, SDK server, same verifier": ("sdk", lambda: sdk.call_tool("bare", {})),
            "bare tool, SDK server + SSE resumption": (
                "sdk-resumable",
                lambda: resumable.call_tool("bare", {}),
            ),
        }
        samples: dict[str, list[float]] = {name: [] for name in calls_of}
        cpu: dict[str, float] = dict.fromkeys(calls_of, 0.0)
        for process, call in calls_of.values():  # warm-up
            await timed_calls(stack, process, max(5, calls // 10), call)
        per_round = max(1, calls // ROUNDS)
        for _ in range(ROUNDS):
            for name, (process, call) in calls_of.items():
                latencies, seconds = await timed_calls(stack, process, per_round, call)
                samples[name] += latencies
                cpu[name] += seconds
    rows = {name: (samples[name], cpu[name] / len(samples[name]) * 1e6) for name in calls_of}
    lines = [
        f"{'call (serve + SQLite, INFO logs)':<40} {'n':>5} {'median ms':>10} {'p99 ms':>8} "
        f"{'server CPU µs':>14}"
    ]
    for name, (latencies, cpu_us) in rows.items():
        median, p99 = statistics.median(latencies), percentile(latencies, 0.99)
        lines.append(f"{name:<40} {len(latencies):>5} {median:>10.2f} {p99:>8.2f} {cpu_us:>14.0f}")
    stored = rows["whoami, token read from the store"][1] - rows["whoami_cached, connection in memory"][1]
    ours, bare = rows["bare tool, our server"][1], rows["bare tool, SDK server, same verifier"][1]
    resumable_cpu = rows["bare tool, SDK server + SSE resumption"][1]
    lines.append(f"stored token minus in-memory, server CPU per call: {stored:.0f} µs")
    lines.append(f"bare tool, our server / SDK server, server CPU: {ratio(ours, bare)}")
    lines.append(
        f"bare tool, our server / SDK server with the same SSE resumption: {ratio(ours, resumable_cpu)}"
    )
    return lines


def ratio(ours: float, theirs: float) -> str:
    # CPU comes in 10 ms kernel ticks: a short (--quick) run may read none for a server.
    return f"{ours / theirs:.2f}x" if theirs > 0 else "n/a (no CPU tick read; run without --quick)"


async def session_rows(stack: Stack, sessions: int) -> list[str]:
    """Server CPU of a whole MCP session (initialize, initialized, the GET stream, tools/list,
    DELETE) on our server and on the two bare SDK servers: the part of a connect flow that is the
    SDK's, whatever the server does."""
    targets = {
        "session, our server": ("server", _Target(stack.data_dir, stack.mcp_url)),
        "session, SDK server": ("sdk", _Target(stack.data_dir, stack.sdk_url)),
        "session, SDK server + SSE resumption": (
            "sdk-resumable",
            _Target(stack.data_dir, stack.sdk_resumable_url),
        ),
    }

    async def session(target: _Target) -> None:
        async with mcp_client(target, "session-user", "legacy") as (client, _):
            await client.list_tools()

    cpu: dict[str, float] = dict.fromkeys(targets, 0.0)
    per_round = max(1, sessions // ROUNDS)
    for _ in range(ROUNDS):
        for name, (process, target) in targets.items():
            cpu0 = stack.cpu(process)
            for _ in range(per_round):
                await session(target)
            cpu[name] += stack.cpu(process) - cpu0
    lines = [f"{'MCP session: open, tools/list, close':<40} {'n':>5} {'server CPU ms':>14}"]
    for name, seconds in cpu.items():
        lines.append(f"{name:<40} {per_round * ROUNDS:>5} {seconds / (per_round * ROUNDS) * 1000:>14.2f}")
    return lines


@dataclass(frozen=True)
class _Target:
    data_dir: Path
    mcp_url: str


# ---- main ------------------------------------------------------------------------------------


TABLES = ("load", "hops", "store", "whoami", "backends")


@dataclass(frozen=True)
class Plan:
    levels: tuple[tuple[int, int], ...]  # (parallel users, flows)
    full_load: bool  # also the `demo` and `serve` + Redis rows (the Redis store-operations row always)
    hop_flows: int
    store_flows: int
    calls: int
    sessions: int
    tables: frozenset[str] = frozenset(TABLES)  # which of TABLES to print


FULL = Plan(
    levels=((1, 10), (10, 40), (50, 100)),
    full_load=True,
    hop_flows=10,
    store_flows=5,
    calls=1000,
    sessions=200,
)
# --quick leaves out `backends`, which starts a Redis Cluster, a Sentinel group and PostgreSQL.
QUICK = Plan(
    levels=((1, 1), (2, 2)),
    full_load=False,
    hop_flows=1,
    store_flows=1,
    calls=10,
    sessions=5,
    tables=frozenset(TABLES) - {"backends"},
)


async def run(plan: Plan, root: Path) -> None:
    if "load" in plan.tables:
        await load_rows(plan, root)
    if "hops" in plan.tables:
        await hop_tables(plan, root)
    if "store" in plan.tables:
        print("\n== store operations per connect flow ==")
        print("\n".join(await store_operations(root / "store", plan.store_flows)), flush=True)
    if "whoami" in plan.tables:
        stack = Stack(root / "whoami", server="bench").start()
        try:
            whoami = await whoami_table(stack, plan.calls)
            sessions = await session_rows(stack, plan.sessions)
        finally:
            stack.stop()
        print("\n== the token-backed call ==")
        print("\n".join(whoami))
        print("\n== the MCP session alone ==")
        print("\n".join(sessions))
    if "backends" in plan.tables:
        print("\n== the token-backed call and one flow on each store (serve + bench tools, INFO logs) ==")
        async for line in backends_table(root, plan.calls, plan.store_flows * 2):
            print(line, flush=True)


async def load_rows(plan: Plan, root: Path) -> None:
    # --quick: one stack (`serve` + SQLite).
    topologies = [("serve, SQLite", "serve", "sqlite")]
    if plan.full_load:
        topologies.insert(0, ("demo", "demo", "sqlite"))
    if plan.full_load and redis_available():
        topologies.append(("serve, Redis", "serve", "redis"))
    elif plan.full_load:
        print("Redis at 127.0.0.1:6379 not available: the Redis rows are skipped")
    print("== connect flows: throughput and CPU per flow (ms of CPU time per flow) ==")
    print(LOAD_HEADER, flush=True)
    for label, server, store in topologies:
        # The same stack again on 2026-07-28 (after the legacy rows of its topology).
        modes = ["legacy", STATELESS] if store == "sqlite" and server != "demo" else ["legacy"]
        stack = Stack(root / f"{server}-{store}", server=server, store=store).start()
        try:
            await one_flow(stack, "warm-up", stack.port, Hops())  # JWKS, discovery, pools
            for mode in modes:
                row_label = label if mode == "legacy" else f"{label}, {STATELESS}"
                for users, flows in plan.levels:
                    print((await load(stack, row_label, users, flows, mode)).line(), flush=True)
        finally:
            stack.stop()
    print(LOAD_NOTE)


async def hop_tables(plan: Plan, root: Path) -> None:
    """One flow at a time on bench/server.py (`serve` plus the benchmark's tools, and
    bench/request_cpu.py measuring the server's CPU per request)."""
    stack = Stack(root / "hops", server="bench", request_cpu=True).start()
    tables: dict[str, tuple[Hops, dict[str, list[float]]]] = {}
    try:
        async with httpx.AsyncClient(base_url=f"http://{HOST}:{stack.port}") as http:
            await one_flow(stack, "warm-up", stack.port, Hops())
            await http.get(REQUEST_CPU_PATH)  # drop the warm-up's figures
            for mode in ("legacy", STATELESS):
                hops = Hops()
                for i in range(plan.hop_flows):
                    await one_flow(stack, f"hops-{mode}-{i}", stack.port, hops, mode)
                tables[mode] = (hops, (await http.get(REQUEST_CPU_PATH)).json())
    finally:
        stack.stop()
    for mode, (hops, cpu) in tables.items():
        title = "2025-11-25" if mode == "legacy" else STATELESS
        print(f"\n== one flow on {title}, hop by hop (one user at a time, client-side ms) ==")
        print(f"{'hop':<62} {'n':>4} {'median':>8} {'p90':>8}")
        for name, samples in hops.samples.items():
            median, p90 = statistics.median(samples), percentile(samples, 0.9)
            print(f"{name:<62} {len(samples):>4} {median:>8.2f} {p90:>8.2f}")
        print(f"\n== the MCP server's CPU per request on {title} (in the server, µs) ==")
        print(f"{'request':<62} {'n':>4} {'median':>8} {'per flow':>9}")
        total = 0.0
        for name, seconds in sorted(cpu.items(), key=lambda item: -sum(item[1])):
            per_flow = sum(seconds) / plan.hop_flows * 1e6
            total += per_flow
            print(f"{name:<62} {len(seconds):>4} {statistics.median(seconds) * 1e6:>8.0f} {per_flow:>9.0f}")
        print(f"{'all requests of a flow (the GET /mcp stream excluded)':<62} {'':>4} {'':>8} {total:>9.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny samples: checks that it runs")
    parser.add_argument("--only", choices=TABLES, action="append", help="print only this table (repeatable)")
    args = parser.parse_args()
    logging.disable(logging.INFO)  # the in-process servers of the store table log every request
    with tempfile.TemporaryDirectory() as tmp:
        plan = QUICK if args.quick else FULL
        if args.only:
            plan = dataclasses.replace(plan, tables=frozenset(args.only))
        asyncio.run(run(plan, Path(tmp)))


if __name__ == "__main__":
    main()

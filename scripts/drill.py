"""The operability drill: N users connect MockHub and call a tool through two `serve` replicas
behind the shipped nginx, with Redis and `mock-providers`, while one fault at a time is injected.

    python scripts/drill.py [--store redis|postgres|cluster|sentinel] [--users 50]
                            [--addresses 1] [--faults kill,redis,...] [--keep DIR]

Everything runs on loopback (its own store: a redis-server with AOF, a PostgreSQL, a three-primary
Redis Cluster or a primary, replica and three sentinels; nginx, the replicas and the mock
providers on free 127.0.0.1 ports) and stops by itself: each round is bounded by
--round-seconds. Then it prints one row per fault:

- calls failed: tool calls that got an error instead of an answer (an elicitation or a result),
  out of all calls made;
- flows failed: users who did not end with a working `whoami` (a client whose session died
  re-initializes, as a 2025-11-25 client must after a 404, and carries on);
- notifications lost: 2025-11-25 flows whose notifications/elicitation/complete did not arrive
  within --notify-seconds while the replica holding the session stayed up (a flow whose replica
  was stopped is counted under "replica gone": its session, and the stream, went with it);
- tokens lost: users whose connection is missing from the store after their flow's success page;
- first good call: seconds from the fault's start to the first call answered that was sent after
  the last failed one (when the service was back for everyone).

Faults: `none` (baseline), `kill` (SIGKILL one replica, start it again), `redis` (restart Redis),
`rolling` (SIGTERM and restart each replica in turn, docs/deploy.md "Rolling restart"),
`token500` / `tokenhang` (MockHub's token endpoint fails / hangs for a few seconds, through the
mock providers' loopback admin endpoint), `rotate` (a new encryption key rolled out in two
rolling restarts, then `mcp-url-connect keys rotate` while flows run), `store` (the fault that
fits the store: Redis restarted, PostgreSQL restarted, a Cluster primary killed and started again,
a Sentinel failover with the primary killed, then back as a replica).

Users come from `--addresses` source addresses, 127.0.0.1 to 127.0.0.N, user i from the
(i mod N)+1-th: 1 is everyone behind one address (a hosted MCP client's egress, a company's NAT),
more spreads them as over many machines. The router limits per address only what carries no
bearer token (docs/deploy.md, "Limits").

SQLite serves one replica, so it has no place in this two-replica drill.
"""

from __future__ import annotations

import argparse
import base64
import functools
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx
from mcp import Client
from mcp.shared.exceptions import MCPError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from mock_providers.app import ADMIN_PATH
from mock_providers.testing.browser import Browser
from mock_providers.testing.client import Recorder, accept, connect_url, mcp_client
from mock_providers.testing.cluster import REPLICAS, Cluster
from mock_providers.testing.store_servers import ClusterGroup, PostgresServer, SentinelGroup
from token_store import KeyRing, UserRef, open_store

FAULTS = ("none", "kill", "redis", "rolling", "token500", "tokenhang", "rotate", "store")
STORES = ("redis", "postgres", "cluster", "sentinel")
EXTRA_CALLS = 3  # calls after the connection, at least; more until the fault is over
CALL_GAP_SECONDS = 1.0
REOPENS = 3  # failed calls after which a flow gives up (404s do not count: the client re-initializes)
CONNECT_TRIES = 2  # browser legs a user tries (the second once the fault is over)
FAULT_AFTER_SECONDS = 30.0  # at the latest, into the round
PROVIDER_FAULT_SECONDS = 3.0


@dataclass
class Flow:
    user: str
    mode: str
    calls: int = 0
    failed_calls: int = 0
    connect_errors: int = 0  # browser legs that ended on an error page
    session_404s: int = 0  # calls sent again on a new session after 404 "Session not found"
    connected: bool = False  # the browser reached the success page
    done: bool = False  # ended with a working call
    notification: str = ""  # legacy: "arrived", "lost", "replica gone"
    errors: list[str] = field(default_factory=list)
    answered_at: list[float] = field(default_factory=list)  # when each good call was sent
    failed_at: list[float] = field(default_factory=list)  # when each failed call was sent


@dataclass
class Downtime:
    """When each replica was down (signalled until ready again), by the fault runner's clock."""

    windows: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: {r: [] for r in REPLICAS})

    def record(self, name: str, action: Callable[[], None]) -> None:
        started = time.monotonic()
        try:
            action()
        finally:
            self.windows[name].append((started, time.monotonic()))

    def was_down(self, name: str, start: float, end: float) -> bool:
        return any(a <= end and b >= start for a, b in self.windows.get(name, []))


@dataclass
class Drill:
    cluster: Cluster
    users: int
    notify_seconds: float
    round_seconds: float
    addresses: int = 1
    downtime: Downtime = field(default_factory=Downtime)
    fault_over: anyio.Event = field(default_factory=anyio.Event)
    half_connected: anyio.Event = field(default_factory=anyio.Event)
    connected_count: int = 0
    sessions_on: Counter[str] = field(default_factory=Counter)  # legacy sessions per replica
    keyring: str = ""  # the replicas' MCPUC_ENCRYPTION_KEYS
    issuer: str = ""  # MCPUC_AUTH_ISSUER: users are (issuer, name)
    store_fault: Callable[[], None] | None = None  # the `store` fault of this drill's store
    fault_started: float = 0.0

    # -- one user's flow -----------------------------------------------------------------------

    def address_of(self, index: int) -> str:
        """The source address of user `index`: 127.0.0.1 to 127.0.0.<addresses>."""
        return f"127.0.0.{index % self.addresses + 1}"

    async def flow(self, user: str, mode: str, address: str) -> Flow:
        """One user: connect MockHub, then call whoami until the fault is over.

        A call answered 404 "Session not found" (its replica went away) is sent again on a new
        session, as a 2025-11-25 client must re-initialize after a 404
        (2025-11-25/basic-transports.mdx, "Session Management"). Any other failed call counts as
        failed and is not sent again. A user whose browser leg ended on an error page tries once
        more when the fault is over, as a person would."""
        result = Flow(user, mode)
        extra = 0
        resend = False
        failures_left = REOPENS
        while True:
            try:
                async with (
                    Browser(local_address=address) as browser,
                    mcp_client(self.cluster, user, mode, on_url=accept, local_address=address) as (
                        client,
                        recorder,
                    ),
                ):
                    while not result.connected:
                        result.calls += not resend
                        resend = False
                        await self._connect(client, recorder, browser, result)
                        if not result.connected:
                            result.connect_errors += 1
                            if result.connect_errors >= CONNECT_TRIES:
                                return result
                            await self.fault_over.wait()
                    while extra < EXTRA_CALLS or not self.fault_over.is_set():
                        result.calls += not resend
                        resend = False
                        sent = time.monotonic()
                        answer = await client.call_tool("whoami", {})
                        if answer.is_error:
                            result.failed_calls += 1
                            result.failed_at.append(sent)
                            result.errors.append(f"whoami: {answer.content}")
                        else:
                            result.answered_at.append(sent)
                        extra += 1
                        await anyio.sleep(CALL_GAP_SECONDS)
                    result.done = True
                    return result
            except Exception as exc:
                if result.done:
                    return result  # the session ended under the client as it left: nothing lost
                if session_gone(exc):
                    result.session_404s += 1
                    resend = True
                else:
                    result.failed_calls += 1
                    result.failed_at.append(time.monotonic())
                    result.errors.append(_describe(exc))
                    extra += result.connected
                    failures_left -= 1
                    if failures_left < 0:
                        return result
                await anyio.sleep(CALL_GAP_SECONDS)

    async def _connect(self, client: Client, recorder: Recorder, browser: Browser, result: Flow) -> None:
        """Call whoami (an elicitation), walk the browser leg, wait for the completion (legacy)."""
        try:
            link = await connect_url(client, "whoami")
        except AssertionError:
            if not result.connect_errors:
                raise
            # A retry after a failed flow first answers with what happened (an error result that
            # names the failure); the next call asks for a new connection.
            result.calls += 1
            link = await connect_url(client, "whoami")
        asked = time.monotonic()
        page = await browser.complete_connect(link.url, username=result.user)
        if page.status_code != 200:
            result.errors.append(f"connect page {page.status_code}")
            return
        result.connected = True
        self.connected_count += 1
        if self.connected_count * 2 >= self.users:
            self.half_connected.set()
        if result.mode != "legacy":
            return
        holder = next(iter(recorder.session_ids), "").split(".", 1)[0]
        self.sessions_on[holder] += 1
        try:
            await recorder.wait_completed(link.elicitation_id, self.notify_seconds)
            result.notification = "arrived"
        except TimeoutError:
            gone = self.downtime.was_down(holder, asked, time.monotonic())
            result.notification = "replica gone" if gone else "lost"

    # -- faults --------------------------------------------------------------------------------

    def inject(self, fault: str) -> None:
        cluster = self.cluster
        self.fault_started = time.monotonic()
        if fault == "store":
            assert self.store_fault is not None
            self.store_fault()
        elif fault == "kill":
            # The replica holding the most 2025-11-25 sessions: the worst case. (nginx's
            # round-robin can put every legacy session on one replica when the users alternate
            # between the revisions.)
            victim = max(REPLICAS, key=lambda name: self.sessions_on[name])
            self.downtime.record(victim, functools.partial(self._kill_and_start, victim))
        elif fault == "redis":
            cluster.restart_redis()
        elif fault in ("rolling", "rotate"):
            if fault == "rotate":
                self._roll_out_new_key()
            self._rolling_restart()
            if fault == "rotate":
                cluster.keys_rotate()
        elif fault in ("token500", "tokenhang"):
            mode = "500" if fault == "token500" else "hang"
            self._mockhub({"token_endpoint_mode": mode, "hang_seconds": PROVIDER_FAULT_SECONDS})
            time.sleep(PROVIDER_FAULT_SECONDS)
            self._mockhub({"token_endpoint_mode": "ok"})

    def _kill_and_start(self, name: str) -> None:
        self.cluster.stop_replica(name, signal.SIGKILL)
        self.cluster.start_replica(name)

    def _rolling_restart(self) -> None:
        for name in REPLICAS:
            self.downtime.record(name, functools.partial(self._stop_and_start, name))
            time.sleep(3.0)  # nginx's fail_timeout (2 s) passes before the next one stops

    def _stop_and_start(self, name: str) -> None:
        self.cluster.stop_replica(name)
        self.cluster.start_replica(name)

    def _roll_out_new_key(self) -> None:
        """Steps 1 and 2 of docs/deploy.md, "Encryption keys": append the new key, roll out;
        move it first, roll out. (`inject` then re-encrypts, step 3, while flows run.)"""
        old = self.keyring
        new = "k" + secrets.token_hex(4) + ":" + base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
        self.cluster.environ["MCPUC_ENCRYPTION_KEYS"] = f"{old},{new}"
        self._rolling_restart()
        self.keyring = f"{new},{old}"
        self.cluster.environ["MCPUC_ENCRYPTION_KEYS"] = self.keyring

    def _mockhub(self, knobs: dict[str, object]) -> None:
        httpx.post(self.cluster.providers_url + ADMIN_PATH, json=knobs, timeout=5).raise_for_status()

    # -- one round -----------------------------------------------------------------------------

    async def round(self, fault: str, number: int) -> dict[str, object]:
        flows: list[Flow] = []
        self.fault_over = anyio.Event()
        self.half_connected = anyio.Event()
        self.connected_count = 0
        self.sessions_on = Counter()
        limit = anyio.CapacityLimiter(max(1, min(self.users, 50)))

        async def one(index: int) -> None:
            await anyio.sleep(index * 0.05)  # users arrive over the first seconds
            async with limit:
                mode = "legacy" if index % 2 == 0 else "2026-07-28"
                flows.append(await self.flow(f"drill{number}u{index}", mode, self.address_of(index)))

        async def fault_runner() -> None:
            # When half the users have connected: the others are in every phase of their flow
            # (starting, in the browser, waiting for the notification), these are calling.
            with anyio.move_on_after(FAULT_AFTER_SECONDS):
                await self.half_connected.wait()
            try:
                await anyio.to_thread.run_sync(self.inject, fault)
            finally:
                self.fault_over.set()

        with anyio.move_on_after(self.round_seconds) as bounded:
            async with anyio.create_task_group() as group:
                group.start_soon(fault_runner)
                for index in range(self.users):
                    group.start_soon(one, index)
        lost = await self._tokens_lost([f for f in flows if f.connected])
        back = recovery(flows, self.fault_started)
        calls = sum(f.calls for f in flows)
        failed = sum(f.failed_calls for f in flows)
        return {
            "fault": fault,
            "calls failed": f"{failed}/{calls} ({100 * failed / max(calls, 1):.1f}%)",
            "404, re-initialized": sum(f.session_404s for f in flows),
            "connect errors": sum(f.connect_errors for f in flows),
            "flows failed": f"{sum(not f.done for f in flows) + self.users - len(flows)}/{self.users}",
            "notifications lost": sum(f.notification == "lost" for f in flows),
            "replica gone": sum(f.notification == "replica gone" for f in flows),
            "tokens lost": lost,
            "first good call": back,
            "timed out": bounded.cancelled_caught,
            "errors": sorted({e for f in flows for e in f.errors})[:5],
        }

    async def _tokens_lost(self, flows: list[Flow]) -> int:
        """Connections missing from the store after their flow's success page."""
        store = await open_store(
            self.cluster.store_url, KeyRing.parse(self.keyring), prefix=self.cluster.key_prefix
        )
        try:
            missing = 0
            for flow in flows:
                user = UserRef(self.issuer, flow.user)
                if await store.get_connection(user, "mockhub") is None:
                    missing += 1
            return missing
        finally:
            await store.close()


def recovery(flows: list[Flow], fault_started: float) -> str:
    """Seconds from the fault's start to the first good call sent after the last failed one: when
    the service was back for everyone."""
    failures = [t for f in flows for t in f.failed_at if t >= fault_started > 0]
    if not failures:
        return "no call failed"
    good = [t for f in flows for t in f.answered_at if t > max(failures)]
    return f"{min(good) - fault_started:.1f} s" if good else "none after the last failure"


def session_gone(exc: BaseException) -> bool:
    """The 2025-11-25 answer for a session the server no longer holds: 404 "Session not found"."""
    if isinstance(exc, BaseExceptionGroup):
        return any(session_gone(inner) for inner in exc.exceptions)
    return isinstance(exc, MCPError) and exc.error.message == "Session not found"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return " | ".join(sorted({_describe(inner) for inner in exc.exceptions}))
    if isinstance(exc, MCPError):
        return f"MCPError {exc.error.code}: {exc.error.message}"
    return f"{type(exc).__name__}: {str(exc)[:80]}"


def print_table(rows: list[dict[str, object]]) -> None:
    columns = [
        "fault",
        "calls failed",
        "404, re-initialized",
        "connect errors",
        "flows failed",
        "notifications lost",
        "replica gone",
        "tokens lost",
        "first good call",
    ]
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in columns}
    print(" | ".join(c.ljust(widths[c]) for c in columns))
    print("-|-".join("-" * widths[c] for c in columns))
    for row in rows:
        print(" | ".join(str(row[c]).ljust(widths[c]) for c in columns))
    for row in rows:
        if row["errors"] or row["timed out"]:
            print(f"\n{row['fault']}: {'round timed out; ' if row['timed out'] else ''}errors seen:")
            for error in row["errors"]:  # type: ignore[attr-defined]
                print(f"  {error}")


def store_backend(
    store: str, root: Path
) -> tuple[dict[str, str | None], Callable[[], None], Callable[[], None]]:
    """The drill's own store: the Cluster harness's store arguments, the `store` fault, and how to
    stop it."""
    if store == "postgres":
        postgres = PostgresServer().start()
        postgres.psql("CREATE DATABASE drill")

        def restart_postgres() -> None:
            postgres.stop(keep_data=True)
            postgres.start()

        return {"redis_url": None, "postgres_url": postgres.url("drill")}, restart_postgres, postgres.stop
    if store == "cluster":
        nodes = ClusterGroup(root / "redis-cluster")
        nodes.start()

        def restart_a_primary() -> None:
            nodes.restart(nodes.nodes[0], signal.SIGKILL)  # appendfsync always: nothing acknowledged lost

        return {"redis_url": nodes.url()}, restart_a_primary, nodes.stop
    if store == "sentinel":
        group = SentinelGroup(root / "sentinel")
        group.start()

        def failover() -> None:
            old = group.primary_port()
            next(node for node in group.nodes if node.port == old).stop(signal.SIGKILL)
            group.wait_promoted(old)
            group.restart_stopped_as_replicas()

        return {"redis_url": group.url()}, failover, group.stop
    return {"redis_url": None}, lambda: None, lambda: None  # `redis`: the harness's own redis-server


async def run(args: argparse.Namespace, root: Path) -> list[dict[str, object]]:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    backend, store_fault, stop_store = await anyio.to_thread.run_sync(store_backend, args.store, root)
    cluster = Cluster(
        root,
        nginx_bin=nginx,
        environ={"MCPUC_SHUTDOWN_GRACE_SECONDS": "10", "MCPUC_HTTP_TIMEOUT": "3"},
        **backend,  # type: ignore[arg-type]
    )
    rows = []
    try:
        await anyio.to_thread.run_sync(cluster.start)
    except BaseException:
        await anyio.to_thread.run_sync(stop_store)
        raise
    try:
        drill = Drill(cluster, args.users, args.notify_seconds, args.round_seconds, args.addresses)
        drill.store_fault = cluster.restart_redis if args.store == "redis" else store_fault
        drill.keyring = cluster.serve_env()["MCPUC_ENCRYPTION_KEYS"]
        drill.issuer = cluster.serve_env()["MCPUC_AUTH_ISSUER"]
        for number, fault in enumerate(args.faults):
            print(
                f"round {number}: {fault} on {args.store} ({args.users} users from "
                f"{args.addresses} address{'es' if args.addresses > 1 else ''})",
                file=sys.stderr,
                flush=True,
            )
            rows.append(await drill.round(fault, number))
    finally:
        await anyio.to_thread.run_sync(cluster.stop)
        await anyio.to_thread.run_sync(stop_store)
    return rows


def main() -> int:
    # The clients' own log lines (the SDK's, as sessions end under them) are not the report; the
    # servers' logs are kept with --keep.
    logging.getLogger().addHandler(logging.NullHandler())
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=STORES, default="redis")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument(
        "--addresses", type=int, default=1, help="source addresses the users come from (127.0.0.1-N)"
    )
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    parser.add_argument("--notify-seconds", type=float, default=10.0)
    parser.add_argument("--round-seconds", type=float, default=180.0)
    parser.add_argument("--keep", type=Path, default=None, help="keep logs in this directory")
    args = parser.parse_args()
    args.faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    if not 1 <= args.addresses <= 254:
        parser.error("--addresses: 1 to 254 (127.0.0.1 to 127.0.0.254)")
    if unknown := set(args.faults) - set(FAULTS):
        parser.error(f"unknown fault(s): {', '.join(sorted(unknown))}")
    if args.store != "redis" and "redis" in args.faults:
        parser.error(
            "the redis fault restarts the drill's own redis-server: use --store redis, or the store fault"
        )
    if args.keep is not None:
        rows = anyio.run(run, args, args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="mcpuc-drill-") as scratch:
            rows = anyio.run(run, args, Path(scratch))
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

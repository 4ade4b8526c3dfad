"""Operators' controls at scale: the incident switch and the keep-alive sweep.

    .venv/bin/python -m bench.operators revoke --backend sqlite --connections 10000 [--rate 1000]
    .venv/bin/python -m bench.operators revoke --backend redis --connections 10000
    .venv/bin/python -m bench.operators keepalive --connections 10000 [--replicas 2]

`revoke`: N users, each with a real MockHub grant (issued in MockHub's own state) and its
connection here; then what `connections revoke --provider mockhub --all` runs
(`Operator.revoke_provider`), timed: seconds, RFC 7009 requests MockHub answered per second, and
the connections left (0 expected).

`keepalive`: N grants on Redis, all due (connected longer ago than `refresh_keepalive`); R
replicas (runtimes in this process, each with its own store connection and lifecycle) sweep at
once. Reports Redis commands and CPU (this thread: the replicas, not MockHub) per swept grant,
and refreshes MockHub received per grant (goal: exactly 1).

MockHub runs on a loopback port in a background thread. Redis is a private `redis-server` this
script starts on a free loopback port (no other client's commands in its counters), or, without
that binary, the shared one at 127.0.0.1:6379 (keys under a unique prefix, deleted afterwards;
its command count then includes other clients').
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
import redis.asyncio

from mock_providers import create_mock_providers_app
from mock_providers.demo import build_dev_setup
from mock_providers.testing.servers import HOST, ThreadedServers, free_port
from service.runtime import Runtime
from service.settings import Settings
from token_store import Connection, ConnectionKey, Store, TokenSet, UserRef

SHARED_REDIS_URL = "redis://127.0.0.1:6379/0"
SEED_BATCH = 32  # connections written at once (under the Redis client pool's size)


class Counting:
    """ASGI wrapper counting requests by path and status."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.answers: dict[tuple[str, int], int] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted(message: Any) -> None:
            if message["type"] == "http.response.start":
                key = (scope["path"], message["status"])
                self.answers[key] = self.answers.get(key, 0) + 1
            await send(message)

        await self.app(scope, receive, counted)


class Bench:
    def __init__(self, root: Path, store_url: str, prefix: str) -> None:
        port = free_port()
        providers_url = f"http://{HOST}:{port}"
        setup = build_dev_setup("http://127.0.0.1:9", providers_url, root, http_timeout=30.0)
        self.providers_app = create_mock_providers_app(setup.providers)
        self.counting = Counting(self.providers_app)
        self.servers = ThreadedServers([(self.counting, port)])
        self.settings: Settings = setup.settings.replace(
            store_url=store_url, redis_prefix=prefix
        ).require_safe_to_serve()
        self.hub = self.providers_app.state.mockhub

    def answered(self, path: str, status: int = 200) -> int:
        return self.counting.answers.get((path, status), 0)

    def runtime(self, settings: Settings | None = None) -> Runtime:
        runtime = Runtime(settings or self.settings)
        runtime.run_sweeps = False
        return runtime

    def grant(self, login: str, issued: bool) -> TokenSet:
        """A grant MockHub issued (in its own state, as a code exchange would have), or, with
        `issued` False, tokens MockHub never saw (its revocation endpoint still answers 200,
        RFC 7009 §2.2, after authenticating the client)."""
        access, refresh = f"mhat_{secrets.token_urlsafe(24)}", f"mhrt_{secrets.token_urlsafe(24)}"
        if issued:
            client_id = self.settings.providers["mockhub"].client_id
            token = {"access_token": access, "refresh_token": refresh, "scope": "read:user"}
            self.hub.store_token(token, client_id, login)
        return TokenSet(access, refresh_token=refresh, expires_at=time.time() + 28800, scopes=("read:user",))

    async def seed(self, store: Store, count: int, *, age: float = 0.0, issued: bool = True) -> None:
        now = time.time()
        issuer = self.settings.auth_issuer
        for start in range(0, count, SEED_BATCH):
            batch = []
            for i in range(start, min(count, start + SEED_BATCH)):
                key = ConnectionKey(UserRef(issuer, f"user-{i}"), "mockhub", str(i))
                tokens = self.grant(f"login-{i}", issued)
                batch.append(Connection(key, tokens, f"login-{i}", now - age, now))
            await asyncio.gather(*(store.put_connection(c) for c in batch))


async def bench_revoke(bench: Bench, count: int, rate: float, concurrency: int, issued: bool) -> None:
    runtime = bench.runtime()
    async with runtime.running():
        await bench.seed(runtime.store, count, issued=issued)
        before = bench.answered("/mockhub/revoke")
        started = time.perf_counter()
        removal = await runtime.operator.revoke_provider(
            "bench", "mockhub", rate=rate, concurrency=concurrency
        )
        elapsed = time.perf_counter() - started
        left = len(await runtime.store.find_connections("mockhub"))
    revoked = bench.answered("/mockhub/revoke") - before
    print(
        f"backend {bench.settings.effective_store_url.split(':')[0]}, {count} connections, rate cap {rate}/s"
    )
    print(f"  seconds                  {elapsed:10.1f}")
    print(f"  deleted / revoked        {len(removal.deleted):>6} / {removal.revoked}")
    print(f"  provider requests/s      {revoked / elapsed:10.1f}")
    print(f"  connections left         {left:>6}")


async def bench_keepalive(bench: Bench, count: int, replicas: int, rate: float) -> None:
    hub_config = bench.settings.providers["mockhub"].model_copy(
        update={"refresh_keepalive": 3600, "keepalive_rate": rate}
    )
    settings = bench.settings.replace(providers={"mockhub": hub_config})
    runtimes = [bench.runtime(settings) for _ in range(replicas)]
    counter = redis.Redis.from_url(bench.settings.effective_store_url)
    async with _all_running(runtimes):
        await bench.seed(runtimes[0].store, count, age=7200)
        refreshes_before = bench.hub.refresh_requests
        commands_before = _commands(counter)
        cpu, started = time.thread_time(), time.perf_counter()
        reports = await asyncio.gather(*(r.keepalive.sweep_once() for r in runtimes))
        cpu, elapsed = time.thread_time() - cpu, time.perf_counter() - started
        commands = _commands(counter) - commands_before - 2  # the two INFO calls
        still_due = (await runtimes[0].keepalive.sweep_once()).due.get("mockhub", 0)
    refreshes = bench.hub.refresh_requests - refreshes_before
    outcomes: dict[str, int] = {}
    for report in reports:
        for (_, outcome), n in report.outcomes.items():
            outcomes[outcome] = outcomes.get(outcome, 0) + n
    print(f"redis, {count} grants due, {replicas} replicas sweeping at once, rate cap {rate}/s each")
    print(f"  seconds                        {elapsed:10.1f}")
    print(f"  refreshes at MockHub per grant {refreshes / count:10.3f}  ({refreshes} in all)")
    print(f"  outcomes (all replicas)        {outcomes}")
    print(f"  Redis commands per grant       {commands / count:10.1f}")
    print(f"  CPU ms per grant (replicas)    {1000 * cpu / count:10.2f}")
    print(f"  still due after the sweep      {still_due:>6}")
    counter.close()


class _all_running:
    def __init__(self, runtimes: list[Runtime]) -> None:
        self.runtimes = runtimes
        self.contexts: list[Any] = []

    async def __aenter__(self) -> None:
        for runtime in self.runtimes:
            context = runtime.running()
            await context.__aenter__()
            self.contexts.append(context)

    async def __aexit__(self, *exc: object) -> None:
        for context in reversed(self.contexts):
            await context.__aexit__(None, None, None)


def _commands(client: redis.Redis) -> int:
    info: Any = client.info("stats")
    return int(info["total_commands_processed"])


@contextlib.contextmanager
def private_redis(root: Path) -> Iterator[str]:
    """A Redis of this run's own, or the shared one when `redis-server` is not installed."""
    binary = shutil.which("redis-server")
    if binary is None:
        yield SHARED_REDIS_URL
        return
    port = free_port()
    command = [
        binary,
        "--port",
        str(port),
        "--bind",
        HOST,
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(root),
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)  # noqa: S603 - our own arguments
    url = f"redis://{HOST}:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        for _ in range(100):
            with contextlib.suppress(redis.ConnectionError):
                client.ping()
                break
            time.sleep(0.05)
        client.close()
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def _delete_prefix(url: str, prefix: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        for start in range(0, len(keys), 1000):
            client.unlink(*keys[start : start + 1000])
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("revoke", "keepalive"))
    parser.add_argument("--backend", choices=("sqlite", "redis"), default="redis")
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=1000.0, help="per provider and replica, per second")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument(
        "--unknown-tokens",
        action="store_true",
        help="revoke: tokens MockHub never issued (its revocation of an issued grant scans all its tokens)",
    )
    args = parser.parse_args()
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    with tempfile.TemporaryDirectory() as tmp, private_redis(Path(tmp)) as redis_url:
        root = Path(tmp)
        store_url = redis_url if args.what == "keepalive" or args.backend == "redis" else ""
        bench = Bench(root / "data", store_url, prefix)
        bench.servers.start()
        try:
            if args.what == "revoke":
                issued = not args.unknown_tokens
                asyncio.run(bench_revoke(bench, args.connections, args.rate, args.concurrency, issued))
            else:
                asyncio.run(bench_keepalive(bench, args.connections, args.replicas, args.rate))
        finally:
            bench.servers.stop()
            if store_url:
                _delete_prefix(store_url, prefix)


if __name__ == "__main__":
    main()

"""Two replicas sharing Redis: completion latency and Redis round trips per token-backed call.

    .venv/bin/python -m bench.replicas [--flows 30] [--calls 200]

- completion latency: from the browser's GET of the callback URL to the client receiving
  `notifications/elicitation/complete`, with the callback sent to the replica holding the MCP
  session (same replica) or to the other one (cross replica, via Redis pub/sub);
- Redis commands sent while serving one `whoami` with a stored token.
Needs Redis at 127.0.0.1:6379 (keys under a unique prefix, deleted afterwards). Prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio
from redis.asyncio.client import Redis

from mock_providers import create_mock_providers_app
from mock_providers.demo import build_dev_setup
from mock_providers.testing.browser import Browser, callback_location
from mock_providers.testing.client import Recorder, legacy_elicitation, mcp_client
from mock_providers.testing.servers import HOST, ThreadedServers, free_port
from service.app import create_app

REDIS_URL = "redis://127.0.0.1:6379/0"


class Replica:
    def __init__(self, app: Any, port: int, data_dir: Path) -> None:
        self.app, self.port, self.data_dir = app, port, data_dir

    @property
    def mcp_url(self) -> str:
        return f"http://{HOST}:{self.port}/mcp"


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"{len(samples):>6} {statistics.median(samples):>10.2f} {p99:>10.2f}"


async def completion_latency(replicas: list[Replica], user: str, cross: bool) -> float:
    """One legacy flow; returns ms from the callback request to the notification."""
    browser = Browser()
    entry = replicas[0]
    try:
        async with mcp_client(entry, user, "legacy", on_url=_accept) as (client, recorder):
            elicitation = (await legacy_elicitation(client)).elicitations[0]
            location = urlsplit(await callback_location(browser, elicitation.url, user))  # type: ignore[arg-type]
            target = replicas[1] if cross else replicas[0]
            callback = urlunsplit(location._replace(netloc=f"{HOST}:{target.port}"))
            start = time.perf_counter()
            await asyncio.gather(browser.get(callback), _wait(recorder))
            return (time.perf_counter() - start) * 1000
    finally:
        await browser.aclose()


async def _wait(recorder: Recorder) -> None:
    await asyncio.wait_for(recorder.completed.wait(), 10)


async def _accept(params: Any) -> str:
    return "accept"


async def redis_commands_per_call(replica: Replica, user: str, calls: int) -> float:
    """Average Redis commands sent while serving `whoami` with a stored token."""
    counted = 0
    original = Redis.execute_command

    async def counting(self: Redis, *args: Any, **kwargs: Any) -> Any:
        nonlocal counted
        counted += 1
        return await original(self, *args, **kwargs)

    async with mcp_client(replica, user, "legacy", on_url=_accept) as (client, _):
        await client.call_tool("whoami", {})
        Redis.execute_command = counting  # type: ignore[method-assign]
        try:
            for _ in range(calls):
                await client.call_tool("whoami", {})
        finally:
            Redis.execute_command = original  # type: ignore[method-assign]
    return counted / calls


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--flows", type=int, default=30)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        ports = [free_port(), free_port()]
        providers_port = free_port()
        # One public URL for both (as behind a proxy); the bench talks to each replica directly.
        setup = build_dev_setup(f"http://{HOST}:{ports[0]}", f"http://{HOST}:{providers_port}", data_dir)
        replicas = []
        apps: list[tuple[Any, int]] = [(create_mock_providers_app(setup.providers), providers_port)]
        for i, port in enumerate(ports):
            settings = setup.settings.replace(
                store_url=REDIS_URL, redis_prefix=prefix, replica_id=f"mcp-{i + 1}"
            )
            app = create_app(settings)
            replicas.append(Replica(app, port, data_dir))
            apps.append((app, port))
        servers = ThreadedServers(apps)
        servers.start()
        try:
            await asyncio.sleep(0.5)  # let both replicas subscribe
            same = [await completion_latency(replicas, f"same-{i}", cross=False) for i in range(args.flows)]
            cross = [await completion_latency(replicas, f"cross-{i}", cross=True) for i in range(args.flows)]
            commands = await redis_commands_per_call(replicas[0], "same-0", args.calls)
        finally:
            servers.stop()
            client = redis.asyncio.from_url(REDIS_URL)
            async for key in client.scan_iter(match=f"{prefix}*"):
                await client.delete(key)
            await client.aclose()
    print(f"{'operation (ms)':<52} {'n':>6} {'median':>10} {'p99':>10}")
    print(f"{'completion latency, callback on the same replica':<52} {summary(same)}")
    print(f"{'completion latency, callback on the other replica':<52} {summary(cross)}")
    print(f"Redis commands per whoami with a stored token: {commands:.2f} (over {args.calls} calls)")


if __name__ == "__main__":
    asyncio.run(main())

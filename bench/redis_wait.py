"""The cost of MCPUC_STORE_WAIT_REPLICAS: `put_connection` (a connect's write) on a private primary
with one replica, without and with `WAIT 1`, on loopback.

    .venv/bin/python -m bench.redis_wait [--writes 2000]

Prints the median and p99 per write and the CPU this process spent per write. Loopback hides the
network round trip a real replica adds: on a network, WAIT costs about one primary-to-replica
round trip more.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from mock_providers.testing.store_servers import SentinelGroup
from token_store import Connection, ConnectionKey, KeyRing, RedisStore, TokenSet, UserRef


async def measure(url: str, wait_replicas: int, writes: int) -> tuple[float, float, float]:
    store = await RedisStore.open(
        url,
        KeyRing([("k1", KeyRing.generate_key())]),
        prefix="bench-wait:",
        wait_replicas=wait_replicas,
    )
    tokens = TokenSet(
        access_token="at-bench", refresh_token="rt-bench", expires_at=time.time() + 3600, scopes=()
    )
    key = ConnectionKey(UserRef("https://as.example", "bench"), "github", "1")
    connection = Connection(key, tokens, "bench", connected_at=time.time(), updated_at=time.time())
    try:
        for _ in range(100):
            await store.put_connection(connection)
        times = []
        cpu = time.process_time()
        for _ in range(writes):
            started = time.perf_counter()
            await store.put_connection(connection)
            times.append(time.perf_counter() - started)
        cpu = time.process_time() - cpu
    finally:
        await store.close()
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99)], cpu / writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writes", type=int, default=2000)
    args = parser.parse_args()
    with SentinelGroup(Path(tempfile.mkdtemp(prefix="bench-wait-"))) as group:
        for wait in (0, 1):
            median, p99, cpu = asyncio.run(measure(group.url(), wait, args.writes))
            print(
                f"put_connection, wait_replicas={wait}: median {median * 1e6:.0f} µs, "
                f"p99 {p99 * 1e6:.0f} µs, client CPU {cpu * 1e6:.0f} µs per write"
            )


if __name__ == "__main__":
    main()

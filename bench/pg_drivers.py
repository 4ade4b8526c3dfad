"""The PostgreSQL store's hot read (a connection row by its key, as `get_connection` reads it)
through asyncpg's pool and through psycopg 3's async pool: the measurement behind the driver
choice in docs/postgres.md.

    .venv/bin/pip install 'psycopg[binary,pool]'   # only for this comparison; asyncpg is locked
    .venv/bin/python -m bench.pg_drivers postgresql://user:pass@127.0.0.1:5432/db [--reads 3000]

Creates and drops its own table `bench_pg_drivers`. Prints wall time and process CPU per read,
sequential and 16 concurrent; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

TABLE = "bench_pg_drivers"
KEY = ("https://as.example", "alice", "github")
READ = (
    f"SELECT provider, account, account_label, blob, connected_at, updated_at, status, refreshed_at "  # noqa: S608
    f"FROM {TABLE} WHERE iss = $1 AND sub = $2 AND provider = $3 ORDER BY updated_at DESC, account"
)


async def setup(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        await conn.execute(
            f"CREATE TABLE {TABLE} (iss text, sub text, provider text, account text, account_label text, "
            "blob bytea, connected_at double precision, updated_at double precision, status text, "
            "refreshed_at double precision, PRIMARY KEY (iss, sub, provider, account))"
        )
        blob = os.urandom(420)  # the size of a sealed token set
        for i in range(1000):
            await conn.execute(
                f"INSERT INTO {TABLE} VALUES ($1, $2, $3, $4, 'label', $5, 1.0, $6, 'ok', NULL)",  # noqa: S608
                KEY[0],
                f"user-{i}" if i else KEY[1],
                KEY[2],
                "1",
                blob,
                float(i),
            )
    finally:
        await conn.close()


async def teardown(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
    finally:
        await conn.close()


async def measure(reads: int, read: Callable[[], Awaitable[Any]]) -> tuple[float, float, float]:
    """(median wall ms sequential, CPU µs per read sequential, wall µs per read at 16 concurrent)."""
    for _ in range(200):
        await read()
    samples = []
    cpu = time.process_time()
    for _ in range(reads):
        start = time.perf_counter()
        await read()
        samples.append((time.perf_counter() - start) * 1000)
    cpu_per_read = (time.process_time() - cpu) / reads * 1e6

    async def worker() -> None:
        for _ in range(reads // 16):
            await read()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(16)))
    concurrent = (time.perf_counter() - start) / (reads // 16 * 16) * 1e6
    return statistics.median(samples), cpu_per_read, concurrent


async def bench_asyncpg(url: str, reads: int) -> tuple[float, float, float]:
    pool = await asyncpg.create_pool(url, min_size=4, max_size=10)
    try:

        async def read() -> Any:
            return await pool.fetch(READ, *KEY)

        return await measure(reads, read)
    finally:
        await pool.close()


async def bench_psycopg(url: str, reads: int) -> tuple[float, float, float] | None:
    try:
        from psycopg_pool import AsyncConnectionPool
    except ImportError:
        return None
    read_sql = READ.replace("$1", "%s").replace("$2", "%s").replace("$3", "%s")
    pool = AsyncConnectionPool(url, min_size=4, max_size=10, open=False)
    await pool.open(wait=True)
    try:

        async def read() -> Any:
            async with pool.connection() as conn:
                cursor = await conn.execute(read_sql, KEY, prepare=True)
                return await cursor.fetchall()

        return await measure(reads, read)
    finally:
        await pool.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--reads", type=int, default=3000)
    args = parser.parse_args()
    await setup(args.url)
    try:
        results = {
            "asyncpg (pool)": await bench_asyncpg(args.url, args.reads),
            "psycopg 3 (psycopg_pool, prepared)": await bench_psycopg(args.url, args.reads),
        }
    finally:
        await teardown(args.url)
    print(f"{'driver':<36} {'median ms':>10} {'CPU µs/read':>12} {'µs/read @16':>12}")
    for name, result in results.items():
        if result is None:
            print(f"{name:<36} not installed")
        else:
            print(f"{name:<36} {result[0]:>10.3f} {result[1]:>12.0f} {result[2]:>12.0f}")


if __name__ == "__main__":
    asyncio.run(main())

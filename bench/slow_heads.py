"""Slow request heads against a directly exposed `demo`: how a normal request fares while many
connections hold an unfinished head open, and whether the server closes them.

    .venv/bin/python -m bench.slow_heads [--heads 300] [--hold 30]

Opens `--heads` connections that each send the start of a request head and then one more header
byte every second (a slow-loris client), waits, then times a normal `GET /healthz` on a fresh
connection and counts how many of the slow connections the server has closed.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from pathlib import Path

import httpx

from bench.processes import Stack
from mock_providers.testing.servers import HOST


async def slow_head(port: int, stop: asyncio.Event, closed: list[float], started: float) -> None:
    """One slow-loris connection: records when the server closed it (or refused it: 0.0)."""
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
    except OSError:
        closed.append(0.0)
        return
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        while not stop.is_set():
            writer.write(b"a")
            await writer.drain()
            try:
                await asyncio.wait_for(reader.read(1024), timeout=1.0)  # a 408 or EOF: closed
            except TimeoutError:
                continue
            closed.append(time.monotonic() - started)
            return
    except OSError:
        closed.append(time.monotonic() - started)
    finally:
        writer.close()


async def measure(port: int, heads: int, hold: float) -> None:
    stop = asyncio.Event()
    closed: list[float] = []
    started = time.monotonic()
    tasks = [asyncio.create_task(slow_head(port, stop, closed, started)) for _ in range(heads)]
    await asyncio.sleep(2)
    async with httpx.AsyncClient(timeout=30) as http:
        latencies = []
        for _ in range(int(hold // 2)):
            t0 = time.monotonic()
            try:
                status: int | str = (await http.get(f"http://{HOST}:{port}/healthz")).status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            latencies.append(
                (round(time.monotonic() - started, 1), status, round((time.monotonic() - t0) * 1000, 1))
            )
            await asyncio.sleep(2)
    stop.set()
    await asyncio.gather(*tasks)
    print(f"{heads} slow heads; normal GET /healthz while they were open (t s, status, ms):")
    for row in latencies:
        print("   ", row)
    early = sorted(closed)
    within = sum(1 for c in early if c < hold)
    span = f"(first at {early[0]:.1f} s, last at {early[-1]:.1f} s)" if early else ""
    print(f"slow heads closed by the server within {hold:.0f} s: {within} of {heads} {span}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heads", type=int, default=300)
    parser.add_argument("--hold", type=float, default=30.0)
    parser.add_argument(
        "--nofile", type=int, default=0, help="the server's open-file limit (default: inherited)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(Path(tmp), server="demo").start()
        if args.nofile:
            resource.prlimit(stack.pids["server"], resource.RLIMIT_NOFILE, (args.nofile, args.nofile))
        try:
            asyncio.run(measure(stack.port, args.heads, args.hold))
        finally:
            stack.stop()


if __name__ == "__main__":
    main()

"""Slow clients against a directly exposed `demo`: how a normal request fares while many
connections hold an unfinished request head, or an unfinished body, open, and whether the server
closes them.

    .venv/bin/python -m bench.slow_heads [--heads 300] [--bodies 0] [--hold 30] [--nofile N] [--tree DIR]

Opens `--heads` connections that each send the start of a request head and then one more header
byte every second, and `--bodies` that each send a whole `POST /logout` head (with the session
cookie anyone gets from `GET /login?next=...`) and then one byte of its body every second (slow
loris by the head, and by the body). Meanwhile it times a normal `GET /healthz` on a fresh
connection every 2 s, and counts how many of the slow connections the server closed, and when.
`--nofile` starts the server with that open-file limit (as `ulimit -n` would); `--tree` runs the
demo from another checkout (`git archive <rev> | tar -x -C DIR`), for the same figures before a
change.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench.processes import Stack
from mock_providers.testing.servers import HOST


async def slow_request(
    port: int, start: bytes, stop: asyncio.Event, closed: list[float], began: float
) -> None:
    """One slow-loris connection: `start`, then a byte a second; records when the server closed
    it (or refused it: 0.0)."""
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
    except OSError:
        closed.append(0.0)
        return
    try:
        writer.write(start)
        while not stop.is_set():
            writer.write(b"a")
            await writer.drain()
            try:
                await asyncio.wait_for(reader.read(1024), timeout=1.0)  # a 408 or EOF: closed
            except TimeoutError:
                continue
            closed.append(time.monotonic() - began)
            return
    except OSError:
        closed.append(time.monotonic() - began)
    finally:
        writer.close()


async def logout_head(port: int) -> bytes:
    origin = f"http://{HOST}:{port}"
    async with httpx.AsyncClient() as http:
        login = await http.get(f"{origin}/login", params={"next": "/connections"})
    cookie = login.headers["set-cookie"].split(";", 1)[0]
    return (
        f"POST /logout HTTP/1.1\r\nHost: {HOST}:{port}\r\nOrigin: {origin}\r\nCookie: {cookie}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ncsrf="
    ).encode()


def summary(kind: str, closed: list[float], count: int, hold: float) -> str:
    early = sorted(closed)
    within = sum(1 for c in early if c < hold)
    span = f" (first at {early[0]:.1f} s, last at {early[-1]:.1f} s)" if early else ""
    return f"slow {kind} closed by the server within {hold:.0f} s: {within} of {count}{span}"


async def measure(port: int, heads: int, bodies: int, hold: float) -> None:
    stop = asyncio.Event()
    closed: dict[str, list[float]] = {"heads": [], "bodies": []}
    head_start = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    body_start = await logout_head(port) if bodies else b""
    began = time.monotonic()
    tasks = [
        *(
            asyncio.create_task(slow_request(port, head_start, stop, closed["heads"], began))
            for _ in range(heads)
        ),
        *(
            asyncio.create_task(slow_request(port, body_start, stop, closed["bodies"], began))
            for _ in range(bodies)
        ),
    ]
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
                (round(time.monotonic() - began, 1), status, round((time.monotonic() - t0) * 1000, 1))
            )
            await asyncio.sleep(2)
    stop.set()
    await asyncio.gather(*tasks)
    print(f"{heads} slow heads, {bodies} slow bodies; GET /healthz while they were open (t s, status, ms):")
    for row in latencies:
        print("   ", row)
    for kind, count in (("heads", heads), ("bodies", bodies)):
        if count:
            print(summary(kind, closed[kind], count, hold))


@contextlib.contextmanager
def open_files_at_most(limit: int) -> Iterator[None]:
    """This process's soft open-file limit lowered to `limit` while the block runs: the processes
    it starts keep it (the server reads its limit when it starts)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard) if limit else (soft, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heads", type=int, default=300)
    parser.add_argument("--bodies", type=int, default=0)
    parser.add_argument("--hold", type=float, default=30.0)
    parser.add_argument("--nofile", type=int, default=0, help="the server's open-file limit (default: ours)")
    parser.add_argument("--tree", type=Path, default=None, help="run the demo from this checkout")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(Path(tmp), server="demo", tree=args.tree)
        with open_files_at_most(args.nofile):
            stack.start()
        try:
            asyncio.run(measure(stack.port, args.heads, args.bodies, args.hold))
        finally:
            stack.stop()


if __name__ == "__main__":
    main()

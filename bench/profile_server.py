"""Where the MCP server process spends its CPU: cProfile of `serve` during connect flows, and of
bench/server.py during token-backed `whoami` calls (or, with `--bare`, only during bare tool
calls: what our server adds around a tool body, bench/bare_call.py).

    .venv/bin/python -m bench.profile_server [--flows 60] [--calls 1000] [--top 25] [--bare]

Prints the top functions by own CPU time and by cumulative CPU time (main thread; the store's worker
threads are not profiled). Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import pstats
import shutil
import tempfile
from pathlib import Path

from bench.flow import load
from bench.flow_parts import Hops, one_flow
from bench.processes import Stack
from mock_providers.testing.client import accept, mcp_client


def top(path: Path, limit: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out)
    stats.sort_stats("tottime").print_stats(limit)
    stats.sort_stats("cumulative").print_stats(limit)
    stats.sort_stats("cumulative").print_stats(r"service/|token_store/|connect_routes/", limit)
    return out.getvalue()


async def profile_flows(root: Path, flows: int) -> Path:
    profile = root / "flows.prof"
    stack = Stack(root / "flows", profile=profile).start()
    try:
        await one_flow(stack, "warm-up", stack.port, Hops())
        await load(stack, "serve, SQLite", 10, flows)
    finally:
        stack.stop()
    return profile


async def profile_calls(root: Path, calls: int) -> Path:
    profile = root / "whoami.prof"
    stack = Stack(root / "whoami", server="bench", profile=profile).start()
    try:
        await one_flow(stack, "whoami-user", stack.port, Hops())
        async with mcp_client(stack, "whoami-user", "legacy", on_url=accept) as (client, _):
            for _ in range(calls):
                await client.call_tool("whoami", {})
    finally:
        stack.stop()
    return profile


async def profile_bare(root: Path, calls: int) -> Path:
    profile = root / "bare.prof"
    stack = Stack(root / "bare", server="bench", profile=profile).start()
    try:
        async with mcp_client(stack, "bare-user", "legacy", on_url=accept) as (client, _):
            for _ in range(calls):
                await client.call_tool("bare", {})
    finally:
        stack.stop()
    return profile


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--flows", type=int, default=60)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--keep", type=Path, default=None, help="copy the .prof files here")
    parser.add_argument("--bare", action="store_true", help="only bare tool calls (bench/bare_call.py)")
    args = parser.parse_args()
    logging.disable(logging.INFO)  # this process's in-process helpers; the servers log at INFO
    with tempfile.TemporaryDirectory() as tmp:
        if args.bare:
            bare = await profile_bare(Path(tmp), args.calls)
            if args.keep is not None:
                args.keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(bare, args.keep / bare.name)
            print(f"==== bench/server.py during {args.calls} bare tool calls ====")
            print(top(bare, args.top))
            return
        flows = await profile_flows(Path(tmp), args.flows)
        calls = await profile_calls(Path(tmp), args.calls)
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            for path in (flows, calls):
                shutil.copy(path, args.keep / path.name)
        print(f"==== serve during {args.flows} connect flows (10 users) ====")
        print(top(flows, args.top))
        print(f"==== bench/server.py during {args.calls} whoami calls (token from the store) ====")
        print(top(calls, args.top))


if __name__ == "__main__":
    asyncio.run(main())

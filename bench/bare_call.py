"""A bare tool call on our server against the SDK's `MCPServer` with the same SSE resumption.

    .venv/bin/python -m bench.bare_call [--calls 3000] [--turn 100] [--baseline DIR]

Both servers come from bench/server.py (`ours`: `serve` plus a tool that returns a constant;
`sdk-resumable`: the SDK's server with our bearer verifier, the same tool and our per-session
event store), each in its own process with INFO logs, as `serve` runs. One client session per
server calls `bare` in turns of `--turn` calls, the servers taking turns, so drift in a shared
machine's load weighs on both alike. Server CPU is the process's, read from the scheduler's
per-thread counters in nanoseconds (bench/processes.py `cpu_nanoseconds`).

`--baseline DIR` runs a third server, DIR's bench/server.py `ours` (another checkout of this
repository, e.g. `git worktree add DIR main`, with this checkout's bench/ copied in so that both
run the same harness), in the same turns: an A/B of two versions side by side.

Prints CPU per call and the ratios, each with the spread of its per-round values; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from bench.processes import Stack
from mock_providers.testing.client import accept, mcp_client
from mock_providers.testing.servers import HOST


@dataclass(frozen=True)
class _Target:
    data_dir: Path
    mcp_url: str


async def turn(stack: Stack, process: str, calls: int, call: Callable[[], Awaitable[Any]]) -> int:
    """CPU nanoseconds the server process spent on `calls` sequential calls."""
    start = stack.cpu_ns(process)
    for _ in range(calls):
        result = await call()
        if result.is_error:
            raise RuntimeError(f"call failed: {result}")
    return stack.cpu_ns(process) - start


def spread(ratios: list[float]) -> str:
    ordered = sorted(ratios)
    return (
        f"per round: median {statistics.median(ordered):.3f}, "
        f"min {ordered[0]:.3f}, max {ordered[-1]:.3f} ({len(ordered)} rounds)"
    )


async def measure(stack: Stack, calls: int, per_turn: int) -> list[str]:
    targets = {
        "ours": ("server", _Target(stack.data_dir, stack.mcp_url)),
        "SDK + SSE resumption": ("sdk-resumable", _Target(stack.data_dir, stack.sdk_resumable_url)),
    }
    if stack.baseline is not None:
        targets["baseline"] = (
            "baseline",
            _Target(stack.data_dir, f"http://{HOST}:{stack.baseline_port}/mcp"),
        )
    async with AsyncExitStack() as sessions:
        clients = {}
        for name, (process, target) in targets.items():
            client, _ = await sessions.enter_async_context(
                mcp_client(target, "bare-user", "legacy", on_url=accept)
            )
            clients[name] = (process, client)
        for process, client in clients.values():  # warm-up
            await turn(stack, process, per_turn, partial(client.call_tool, "bare", {}))
        rounds = max(1, calls // per_turn)
        cpu: dict[str, list[int]] = {name: [] for name in clients}
        for _ in range(rounds):
            for name, (process, client) in clients.items():
                cpu[name].append(await turn(stack, process, per_turn, partial(client.call_tool, "bare", {})))
    per_call = {name: sum(ns) / (rounds * per_turn) / 1000 for name, ns in cpu.items()}
    lines = [
        f"bare tool call, {rounds * per_turn} calls per server in turns of {per_turn}: server CPU µs per call"
    ]
    lines += [f"  {name:<24} {us:>8.0f}" for name, us in per_call.items()]

    def ratio_line(label: str, a: str, b: str) -> str:
        rounds_ratio = [x / y for x, y in zip(cpu[a], cpu[b], strict=True)]
        return f"{label}: {per_call[a] / per_call[b]:.3f}x  ({spread(rounds_ratio)})"

    lines.append(
        ratio_line("bare tool call, ours / SDK with the same SSE resumption", "ours", "SDK + SSE resumption")
    )
    if "baseline" in cpu:
        lines.append(
            ratio_line(
                "bare tool call, baseline / SDK with the same SSE resumption",
                "baseline",
                "SDK + SSE resumption",
            )
        )
        lines.append(ratio_line("bare tool call, ours / baseline", "ours", "baseline"))
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=3000, help="calls per server")
    parser.add_argument("--turn", type=int, default=100, help="calls per server per turn")
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout to run beside this one")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(Path(tmp), server="bench", baseline=args.baseline).start()
        try:
            lines = await measure(stack, args.calls, args.turn)
        finally:
            stack.stop()
    print("\n".join(lines))


if __name__ == "__main__":
    asyncio.run(main())

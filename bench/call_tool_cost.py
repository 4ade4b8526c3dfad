"""CPU per call of what `ObservedMCPServer.call_tool` adds around a tool, in process.

    .venv/bin/python -m bench.call_tool_cost [--calls 20000] [--runs 7] [--baseline DIR]

Calls a tool that returns a constant through the SDK's `MCPServer.call_tool` and through ours
(the unknown-tool check, the tool-call metrics, the span with tracing off, as `serve` runs by
default) in one process, and prints the difference per call. Each run times batches of
`--calls` calls by the process's CPU clock, the two servers taking turns, and keeps each one's
fastest batch (the one least disturbed by other processes). `--baseline DIR` runs the same in
DIR (another checkout of this repository, with this checkout's bench/ copied in), each run in a
fresh process, the two checkouts taking turns; it prints the median over runs of each and the
range of the added cost. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

from bench.side_by_side import figures_in

BATCHES = 5


def bare() -> str:
    return "ok"


async def batch(server: MCPServer[Any], calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        await server.call_tool("bare", {})
    return (time.process_time() - start) / calls * 1e6


async def child(calls: int) -> dict[str, float]:
    from service.observability.metrics import Metrics
    from service.observability.tracing import Tracing

    try:
        from service.mcp.server import ObservedMCPServer
    except ImportError:  # pragma: no cover - a checkout from before the module's name
        from service.server import ObservedMCPServer  # type: ignore[no-redef,import-not-found,unused-ignore]

    sdk: MCPServer[Any] = MCPServer("sdk")
    ours: MCPServer[Any] = ObservedMCPServer("ours", metrics=Metrics(), tracing=Tracing())
    for server in (sdk, ours):
        server.add_tool(bare, name="bare")
        await batch(server, calls // 10)  # warm-up
    sdk_us = ours_us = float("inf")
    for _ in range(BATCHES):  # the two take turns, so a burst of load weighs on both alike
        sdk_us = min(sdk_us, await batch(sdk, calls))
        ours_us = min(ours_us, await batch(ours, calls))
    return {"sdk": sdk_us, "ours": ours_us, "added": ours_us - sdk_us}


def run_in(tree: Path, calls: int) -> dict[str, float]:
    return figures_in(tree, "bench.call_tool_cost", "--calls", str(calls))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.calls))))
        return
    trees = {"ours": Path.cwd()} | ({"baseline": args.baseline} if args.baseline else {})
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.runs):
        for name, tree in trees.items():
            runs[name].append(run_in(tree, args.calls))
    print(
        f"call_tool, fastest of {BATCHES} batches of {args.calls} calls, median of {args.runs} runs: "
        "µs per call"
    )
    for name, results in runs.items():
        median = {key: statistics.median(r[key] for r in results) for key in ("sdk", "ours", "added")}
        spread = sorted(r["added"] for r in results)
        print(
            f"  {name:<9} SDK {median['sdk']:6.1f}  ours {median['ours']:6.1f}  "
            f"added {median['added']:5.1f} (runs {spread[0]:.1f}-{spread[-1]:.1f})"
        )


if __name__ == "__main__":
    main()

"""The connect flow embedded in an integrator's server, against our own server and the bare tool.

    .venv/bin/python -m bench.embedding [--calls 300] [--flows 20]
    .venv/bin/python -m bench.embedding --calls 300 --runs 5 --baseline DIR    # FastMCP ratio, A/B

1. FastMCP (examples/embed_fastmcp.py): the token-backed call through `UrlConnectMiddleware` and
   `ProviderConnection` (store read, the broker's checks, then MockHub's userinfo) against the same
   FastMCP server's bare tool making the same MockHub request with a token it already holds.
2. A whole connect flow (-32042, browser, completion notification, retry) on our server, on the
   SDK embedding (examples/embed_sdk.py) and on the FastMCP one: CPU per flow of this process,
   which runs the servers, the mock providers, the client and the browser alike, so the
   differences between rows are the servers'.

Everything runs in this process over real loopback sockets (the kit's threaded servers). Prints
tables; asserts nothing. `--baseline DIR` runs only part 1, each run in a fresh process, in this
checkout and in DIR (another checkout, e.g. `git worktree add DIR main`, with this checkout's
bench/ copied in) taking turns (bench/side_by_side.py), and prints each one's median ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
from fastmcp import FastMCP
from starlette.applications import Starlette

from bench.side_by_side import figures_in
from mcp_url_connect import Settings, UrlConnect
from mcp_url_connect.testing import Mcpuc

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def fastmcp_with_bare_tool(settings: Settings) -> Starlette:
    """examples/embed_fastmcp.py's server plus `hub_login_bare`: the same MockHub request with a
    token handed to it (by `remember_token`), no store and no middleware involved."""
    connect = UrlConnect(settings)
    mcp: FastMCP = example("embed_fastmcp").build_server(settings, connect)
    userinfo = settings.providers["mockhub"].userinfo_url
    held: dict[str, str] = {}
    http = httpx.AsyncClient()

    @mcp.tool
    async def remember_token(token: str) -> str:
        held["token"] = token
        return "ok"

    @mcp.tool
    async def hub_login_bare() -> dict[str, Any]:
        answer = await http.get(userinfo, headers={"Authorization": f"Bearer {held['token']}"})
        return {"login": answer.json()["login"]}

    return connect.install(mcp.http_app(path="/mcp"))


async def timed(n: int, op: Callable[[], Awaitable[Any]]) -> list[float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await op()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def row(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"{name:<56} {len(samples):>6} {statistics.median(samples):>9.2f} {p99:>9.2f}"


async def connect(stack: Mcpuc, user: str, tool: str) -> None:
    async with stack.client(user, mode="legacy") as client:
        link = await stack.connect_url(client, tool, {})
        await stack.browser(user).approve(link.url, login="octocat")
        await stack.retry(client, link, tool, {})


async def fastmcp_rounds(root: Path, calls: int) -> dict[str, list[float]]:
    """Latency (ms) of `calls` adapter calls and as many bare ones, interleaved, and the process's
    CPU per call (ms) of each batch of 50."""
    stack = Mcpuc(root / "fastmcp", app=fastmcp_with_bare_tool).start()
    try:
        await connect(stack, "bench", "hub_login")
        hub = stack.providers.hub
        token = next(iter(hub.issued_access_tokens))
        async with stack.client("bench", mode="legacy") as client:
            await client.call_tool("remember_token", {"token": token})
            adapter = lambda: client.call_tool("hub_login", {})  # noqa: E731
            bare = lambda: client.call_tool("hub_login_bare", {})  # noqa: E731
            await timed(20, adapter)  # warm both paths
            await timed(20, bare)
            rounds: dict[str, list[float]] = {"adapter": [], "bare": [], "adapter_cpu": [], "bare_cpu": []}
            for _ in range(calls // 50):  # interleaved, so drift hits both alike
                for name, op in (("adapter", adapter), ("bare", bare)):
                    # A garbage collection landing in one batch and not the other is noise.
                    gc.collect()
                    gc.disable()
                    cpu = time.process_time()
                    try:
                        rounds[name] += await timed(50, op)
                    finally:
                        gc.enable()
                    # This process's CPU per call (servers and client alike): steadier than
                    # latency on a shared machine; the client's part is the same for both tools.
                    rounds[f"{name}_cpu"].append((time.process_time() - cpu) * 1000 / 50)
    finally:
        stack.stop()
    return rounds


async def fastmcp_calls(root: Path, calls: int) -> None:
    rounds = await fastmcp_rounds(root, calls)
    print(f"{'FastMCP, token-backed call (ms)':<56} {'calls':>6} {'median':>9} {'p99':>9}")
    print(row("through UrlConnectMiddleware + ProviderConnection", rounds["adapter"]))
    print(row("bare tool, same MockHub request, token in memory", rounds["bare"]))
    ratio = statistics.median(rounds["adapter"]) / statistics.median(rounds["bare"])
    print(f"{'ratio (median)':<56} {ratio:>26.2f}x")
    cpu = statistics.median(rounds["adapter_cpu"]) / statistics.median(rounds["bare_cpu"])
    print(f"{'ratio of this process CPU per call (median of batches)':<56} {cpu:>26.2f}x\n")


async def flows(root: Path, count: int) -> None:
    variants: dict[str, tuple[Callable[[Settings], Any] | None, str]] = {
        "our server (create_app), whoami": (None, "whoami"),
        "SDK embedding (examples/embed_sdk.py), hub_login": (example("embed_sdk").build_app, "hub_login"),
        "FastMCP embedding (examples/embed_fastmcp.py), hub_login": (
            example("embed_fastmcp").build_app,
            "hub_login",
        ),
    }
    print(f"{'one connect flow, this process CPU (ms)':<56} {'flows':>6} {'median':>9} {'p99':>9}")
    for name, (factory, tool) in variants.items():
        stack = Mcpuc(root / name.split()[0], app=factory).start()
        try:
            await connect(stack, "warm-up", tool)
            cpu: list[float] = []
            for i in range(count):
                started = time.process_time()
                await connect(stack, f"user-{i}", tool)
                cpu.append((time.process_time() - started) * 1000)
        finally:
            stack.stop()
        print(row(name, cpu))


def side_by_side(trees: dict[str, Path], calls: int, runs: int) -> None:
    """Part 1 in each tree, `runs` fresh processes each, taking turns."""
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(runs):
        for name, tree in trees.items():
            results[name].append(figures_in(tree, "bench.embedding", "--calls", str(calls)))
    print(f"FastMCP token-backed call / bare tool, median of {calls} calls each, {runs} runs")
    for name, figures in results.items():
        for what, unit in (("", "latency"), ("_cpu", "CPU")):
            ratios = sorted(f[f"{'cpu_' if what else ''}ratio"] for f in figures)
            adapter = statistics.median(f[f"adapter{what}"] for f in figures)
            bare = statistics.median(f[f"bare{what}"] for f in figures)
            print(
                f"  {name:<14} {unit:<8} adapter {adapter:6.2f} ms  bare {bare:6.2f} ms  "
                f"ratio {statistics.median(ratios):.3f}x (runs {ratios[0]:.3f}-{ratios[-1]:.3f})"
            )


async def main() -> None:
    # The SDK's MCPServer configures the root logger at INFO (with rich, which FastMCP brings) when
    # nothing has: configure it first, so that no request pays for a log line here.
    logging.basicConfig(level=logging.WARNING)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--flows", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    calls = max(50, args.calls)
    if args.child:
        with tempfile.TemporaryDirectory() as tmp:
            rounds = await fastmcp_rounds(Path(tmp), calls)
        medians = {name: statistics.median(samples) for name, samples in rounds.items()}
        ratios = {
            "ratio": medians["adapter"] / medians["bare"],
            "cpu_ratio": medians["adapter_cpu"] / medians["bare_cpu"],
        }
        print(json.dumps(medians | ratios))
        return
    if args.baseline is not None:
        side_by_side({"this checkout": Path.cwd(), "baseline": args.baseline}, calls, args.runs)
        return
    with tempfile.TemporaryDirectory() as tmp:
        await fastmcp_calls(Path(tmp), calls)
        await flows(Path(tmp), args.flows)


if __name__ == "__main__":
    asyncio.run(main())

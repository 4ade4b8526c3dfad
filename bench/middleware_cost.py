"""CPU per request of the app around its routes, in process: no sockets, no uvicorn, no client.

    .venv/bin/python -m bench.middleware_cost [--requests 4000] [--runs 7] [--baseline DIR]

Requests go straight into `create_app`'s ASGI app: `GET /healthz` (the app's own layers, routing
and a small JSON response) and `POST /mcp` without a bearer (those layers, then the SDK's app up
to its 401). Each run times batches of `--requests` requests by the process's CPU clock and keeps
the fastest batch (the one least disturbed by other processes). `--baseline DIR` runs the same in
DIR (another checkout of this repository, e.g. `git worktree add DIR main`, with this checkout's
bench/ copied in), each run in a fresh process, the two checkouts taking turns; it prints the
median over runs of each and their ratio. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from starlette.types import Message

from bench.side_by_side import figures_in

PATHS = (("GET", "/healthz"), ("POST", "/mcp"))
BATCHES = 5


def scope(method: str, path: str) -> dict[str, Any]:
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"accept", b"application/json, text/event-stream"),
        (b"content-type", b"application/json"),
        (b"content-length", b"2"),
        (b"mcp-protocol-version", b"2025-11-25"),
        (b"user-agent", b"bench"),
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


async def receive() -> Message:
    return {"type": "http.request", "body": b"{}", "more_body": False}


async def child(requests: int) -> dict[str, float]:
    """µs of CPU per request on each of PATHS, the fastest of BATCHES batches."""
    from mock_providers.demo import build_demo
    from service.app import create_app

    statuses: list[int] = []

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(build_demo("127.0.0.1", 8000, 8001, Path(tmp)).settings)
        fastest: dict[str, float] = {}
        for method, path in PATHS:
            for _ in range(requests // 10):  # warm-up
                await app(scope(method, path), receive, send)
            best = float("inf")
            for _ in range(BATCHES):
                start = time.process_time()
                for _ in range(requests):
                    await app(scope(method, path), receive, send)
                best = min(best, time.process_time() - start)
            fastest[f"{method} {path} ({statuses[-1]})"] = best / requests * 1e6
    return fastest


def run_in(tree: Path, requests: int) -> dict[str, float]:
    return figures_in(tree, "bench.middleware_cost", "--requests", str(requests))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.requests))))
        return
    trees = {"this checkout": Path.cwd()}
    if args.baseline is not None:
        trees["baseline"] = args.baseline
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.runs):  # the trees take turns
        for name, tree in trees.items():
            runs[name].append(run_in(tree, args.requests))
    print(
        f"CPU µs per request in process, median of {args.runs} runs (each the fastest of {BATCHES} batches)"
    )
    medians = {
        name: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for name, rs in runs.items()
    }
    for name, figures in medians.items():
        for key, us in figures.items():
            spread = sorted(r[key] for r in runs[name])
            print(f"  {name:<14} {key:<22} {us:>8.1f}  (runs {spread[0]:.1f} to {spread[-1]:.1f})")
    if "baseline" in medians:
        ours, base = medians["this checkout"], medians["baseline"]
        for (key, us), base_us in zip(ours.items(), base.values(), strict=True):
            print(f"  this checkout / baseline, {key}: {us / base_us:.3f}x ({us - base_us:+.1f} µs)")


if __name__ == "__main__":
    main()

"""A paginated call through `ProviderSession.pages` against the same pages fetched by hand.

    .venv/bin/python -m bench.pagination [--calls 100] [--pages 3] [--per-page 100]

A GitHub stand-in (a Starlette app under uvicorn on loopback, in a thread of this process) serves
`/user/repos` in pages of `--per-page` repositories (about 5.7 kB each, as GitHub's are), with
GitHub's `Link` header. One call reads every page:

- through `api.pages("/user/repos", ...)`: the process's outbound client (its byte limit and
  deadline), the token sent only to the provider, each page's `Link` checked, the rate-limit and
  size rules, the JSON read;
- bare: a plain `httpx.AsyncClient` following the `Link` header itself, with the token in hand.

Interleaved in batches, latency and this process's CPU per call (garbage collection off within a
batch). Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcp_url_connect.testing import HOST, ThreadedServers, free_port
from service.mcp.provider_session import ProviderCalls, ProviderSession
from service.observability.metrics import Metrics
from service.providers.catalogue import ProviderConfig, build_provider
from service.providers.outbound_http import OutboundHttp
from token_store import Connection, ConnectionKey, TokenSet, UserRef

TOKEN = "gho_bench"
BATCH = 10


def github(pages: int, per_page: int) -> Starlette:
    repo = {"id": 0, "full_name": "acme/widgets", "description": "x" * 5_600, "private": False}

    async def repos(request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return JSONResponse({"message": "Bad credentials"}, 401)
        page = int(request.query_params.get("page", 1))
        headers = {}
        if page < pages:
            base = f"{request.url.scheme}://{request.url.netloc}/user/repos?per_page={per_page}"
            headers["Link"] = f'<{base}&page={page + 1}>; rel="next", <{base}&page={pages}>; rel="last"'
        return JSONResponse([{**repo, "id": page * per_page + i} for i in range(per_page)], headers=headers)

    return Starlette(routes=[Route("/user/repos", repos)])


class Fresh:
    """The token never needs a refresh here."""

    async def fresh(self, connection: Connection, provider: ProviderConfig, *, force: bool) -> Connection:
        return connection

    async def refused(self, connection: Connection) -> None:
        raise AssertionError("not expected")


def session(provider: ProviderConfig, outbound: OutboundHttp) -> ProviderSession:
    connection = Connection(
        ConnectionKey(UserRef("https://as.example", "bench"), "github", "1"), TokenSet(TOKEN), "octocat", 1, 1
    )
    calls = ProviderCalls(outbound.client, Metrics())
    return ProviderSession(connection, provider, Fresh(), calls, tool="bench")  # type: ignore[arg-type]


async def through_pages(provider: ProviderConfig, outbound: OutboundHttp, per_page: int) -> int:
    api = session(provider, outbound)  # one per tool call, as the broker makes them
    return len([repo async for repo in api.pages("/user/repos", params={"per_page": per_page})])


async def bare(http: httpx.AsyncClient, base: str, per_page: int) -> int:
    url: str | None = f"{base}/user/repos?per_page={per_page}"
    count = 0
    while url is not None:
        answer = await http.get(url, headers={"Authorization": f"Bearer {TOKEN}"})
        count += len(answer.json())
        url = answer.links.get("next", {}).get("url")
    return count


async def batch(op: Callable[[], Awaitable[int]]) -> tuple[list[float], float]:
    gc.collect()
    gc.disable()
    try:
        latencies = []
        cpu = time.process_time()
        for _ in range(BATCH):
            started = time.perf_counter()
            await op()
            latencies.append((time.perf_counter() - started) * 1000)
        return latencies, (time.process_time() - cpu) * 1000 / BATCH
    finally:
        gc.enable()


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--pages", type=int, default=3)
    parser.add_argument("--per-page", type=int, default=100)
    args = parser.parse_args()
    port = free_port()
    servers = ThreadedServers([(github(args.pages, args.per_page), port)])
    servers.start()
    base = f"http://{HOST}:{port}"
    secret = {"MCPUC_PROVIDER_GITHUB_CLIENT_SECRET": "s"}
    github_preset = build_provider("github", {"preset": "github", "client_id": "c"}, secret)
    provider = github_preset.model_copy(update={"api_base_url": base})
    outbound = OutboundHttp(10.0)
    http = httpx.AsyncClient(timeout=10.0)
    ops: dict[str, Callable[[], Awaitable[int]]] = {
        "api.pages": lambda: through_pages(provider, outbound, args.per_page),
        "bare httpx, Link followed by hand": lambda: bare(http, base, args.per_page),
    }
    try:
        expected = args.pages * args.per_page
        for op in ops.values():  # warm both, and check they read the same
            assert await op() == expected
        latency: dict[str, list[float]] = {name: [] for name in ops}
        cpu: dict[str, list[float]] = {name: [] for name in ops}
        for _ in range(max(1, args.calls // BATCH)):
            for name, op in ops.items():
                samples, per_call = await batch(op)
                latency[name] += samples
                cpu[name].append(per_call)
    finally:
        await http.aclose()
        await outbound.aclose()
        servers.stop()
    print(
        f"{args.pages} pages of {args.per_page} repositories a call (ms)      calls  median    p99  CPU/call"
    )
    for name in ops:
        ordered = sorted(latency[name])
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        print(
            f"{name:<52} {len(ordered):>5} {statistics.median(ordered):>7.2f} {p99:>6.2f} "
            f"{statistics.median(cpu[name]):>9.2f}"
        )
    names = list(ops)
    ratio = statistics.median(latency[names[0]]) / statistics.median(latency[names[1]])
    cpu_ratio = statistics.median(cpu[names[0]]) / statistics.median(cpu[names[1]])
    print(f"api.pages / bare: latency {ratio:.3f}x, CPU {cpu_ratio:.3f}x")


if __name__ == "__main__":
    asyncio.run(main())

"""What bench/flow.py and bench/backends.py share: one connect flow, timed hop by hop or plain,
the servers in this process, counting the Redis round trips of a flow, and timed calls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import mcp_types
from redis.asyncio.connection import AbstractConnection

from bench.processes import Stack
from mock_providers.testing.browser import Browser, forms_in
from mock_providers.testing.client import (
    Recorder,
    accept,
    connect_url,
    legacy_elicitation,
    mcp_client,
    retry,
)
from mock_providers.testing.servers import DemoServers
from mock_providers.testing.tls import client_tls

STATELESS = "2026-07-28"

# ---- one flow, hop by hop -------------------------------------------------------------------


class StampedRecorder(Recorder):
    """A Recorder that notes when the completion notification arrived."""

    notified_at: float | None = None

    async def on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ElicitCompleteNotification) and self.notified_at is None:
            self.notified_at = time.perf_counter()
        await super().on_message(message)


@dataclass
class Hops:
    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, seconds: float) -> None:
        self.samples.setdefault(name, []).append(seconds * 1000)


@contextmanager
def hop(hops: Hops, name: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    hops.add(name, time.perf_counter() - start)


def hop_name(method: str, url: str, server_port: int) -> str:
    parts = urlsplit(url)
    side = "MCP server" if parts.port == server_port else "providers "
    return f"{side} {method} {parts.path}"


async def browser_leg(url: str, user: str, server_port: int, hops: Hops) -> float:
    """Walk the connect link request by request (redirects followed by hand, to time each hop);
    returns when the callback to the MCP server was answered."""
    callback_done = 0.0
    async with httpx.AsyncClient(follow_redirects=False, timeout=30, verify=client_tls()) as http:
        method, data = "GET", None
        for _ in range(20):
            name = hop_name(method, url, server_port)
            start = time.perf_counter()
            page = await http.request(method, url, data=data)
            hops.add(name, time.perf_counter() - start)
            if "/callback/" in url:
                callback_done = time.perf_counter()
            if page.is_redirect:
                url, method, data = urljoin(url, page.headers["location"]), "GET", None
                continue
            forms = forms_in(page.text)
            login = next((f for f in forms if "username" in f.fields), None)
            confirm = next((f for f in forms if "elicitationId" in f.fields), None)
            consent = next((f for f in forms if "decision" in f.buttons), None)
            values: dict[str, str] = {}
            if login is not None:
                form, values = login, {"username": user}
            elif confirm is not None:
                form = confirm
            elif consent is not None:
                form, values = consent, {"login": "octocat", "decision": "approve"}
            else:
                if page.status_code != 200:
                    raise RuntimeError(f"flow ended on HTTP {page.status_code} at {url}")
                return callback_done
            url, method = urljoin(url, form.action or url), form.method.upper()
            data = {**form.fields, **values}
            if method == "GET":
                url, data = str(httpx.URL(url, params=data)), None
    raise RuntimeError("too many steps")


async def one_flow(target: Any, user: str, server_port: int, hops: Hops, mode: str = "legacy") -> None:
    if mode != "legacy":
        await stateless_flow(target, user, server_port, hops)
        return
    recorder = StampedRecorder()
    start = time.perf_counter()
    async with mcp_client(target, user, "legacy", on_url=accept, recorder=recorder) as (client, _):
        hops.add("MCP  initialize (new session)", time.perf_counter() - start)
        with hop(hops, "MCP  tools/call -> -32042"):
            elicitation = (await legacy_elicitation(client)).elicitations[0]
        answered = await browser_leg(str(elicitation.url), user, server_port, hops)
        await asyncio.wait_for(recorder.completed.wait(), 10)
        assert recorder.notified_at is not None
        hops.add("MCP  notification after the callback answered", max(0.0, recorder.notified_at - answered))
        with hop(hops, "MCP  retry tools/call"):
            result = await client.call_tool("whoami", {})
        if result.is_error:
            raise RuntimeError(f"retry failed: {result}")
    hops.add("whole flow", time.perf_counter() - start)


async def stateless_flow(target: Any, user: str, server_port: int, hops: Hops) -> None:
    """The same flow on 2026-07-28: no session (no initialize, GET stream or DELETE), the call
    answered with InputRequiredResult, the retry carrying the answer and the requestState."""
    start = time.perf_counter()
    async with mcp_client(target, user, STATELESS, on_url=accept) as (client, _):
        hops.add("2026-07-28  client start (discover)", time.perf_counter() - start)
        with hop(hops, "2026-07-28  tools/call -> InputRequiredResult"):
            link = await connect_url(client, "whoami")
        await browser_leg(link.url, user, server_port, hops)
        with hop(hops, "2026-07-28  retry with requestState"):
            result = await retry(client, link, "whoami")
        if result.is_error:
            raise RuntimeError(f"retry failed: {result}")
    hops.add("whole flow", time.perf_counter() - start)


# ---- the servers in this process, and what a flow costs them ----------------------------


@asynccontextmanager
async def demo_in_process(root: Path, overrides: dict[str, Any]) -> AsyncIterator[DemoServers]:
    servers = DemoServers(root / "data", overrides=overrides).start()
    try:
        yield servers
    finally:
        servers.stop()


@contextmanager
def counted_redis_writes() -> Iterator[list[int]]:
    """Every write any Redis connection sends (as tests/support/store_contract.py `record_wire`)."""
    writes: list[int] = []
    real = AbstractConnection.send_packed_command

    async def counting(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        writes.append(1)
        await real(self, command, check_health)

    AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]
    try:
        yield writes
    finally:
        AbstractConnection.send_packed_command = real  # type: ignore[method-assign]


async def plain_flow(servers: DemoServers, user: str) -> None:
    async with mcp_client(servers, user, "legacy", on_url=accept) as (client, recorder):
        elicitation = (await legacy_elicitation(client)).elicitations[0]
        async with Browser() as browser:
            await browser.complete_connect(str(elicitation.url), username=user)
        await asyncio.wait_for(recorder.completed.wait(), 10)
        if (await client.call_tool("whoami", {})).is_error:
            raise RuntimeError("retry failed")


# ---- timed calls ----------------------------------------------------------------------------


ROUNDS = 5  # the rows take turns, so a change in the machine's load spreads over all of them


async def timed_calls(
    stack: Stack, process: str, n: int, call: Callable[[], Awaitable[Any]]
) -> tuple[list[float], float]:
    """Latencies (ms) of `n` sequential calls and the server process's CPU seconds they took."""
    samples = []
    cpu0 = stack.cpu(process)
    for _ in range(n):
        start = time.perf_counter()
        result = await call()
        samples.append((time.perf_counter() - start) * 1000)
        if getattr(result, "is_error", False):
            raise RuntimeError(f"call failed: {result}")
    return samples, stack.cpu(process) - cpu0


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]

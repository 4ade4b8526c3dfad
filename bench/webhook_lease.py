"""Webhook leases against a slow receiver: how many messages two replicas deliver twice.

    .venv/bin/python -m bench.webhook_lease [--messages 20] [--receiver-seconds 10] [--backend sqlite]

Two `WebhookSender`s (two replicas, each with its own store connection) send N queued messages to
one receiver that takes `--receiver-seconds` per delivery, at the sender's 10 s timeout. The time
is simulated: one clock judges every lease, and each delivery moves it forward by the receiver's
time (a few real milliseconds pass, so the other replica polls meanwhile). Prints how many
messages arrived more than once and the deliveries in all (N when each arrived once).
`--backend redis` uses the Redis at 127.0.0.1:6379 under a fresh key prefix.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import secrets
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service.observability.metrics import Metrics
from service.observability.webhooks import WebhookSender
from token_store import KeyRing, Store, WebhookMessage, open_store

SENDER_TIMEOUT_SECONDS = 10.0  # the default MCPUC_HTTP_TIMEOUT
REDIS_URL = "redis://127.0.0.1:6379/0"


class SimulatedClock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def receiver(clock: SimulatedClock, seconds: float, received: collections.Counter[str]) -> Starlette:
    async def receive(request: Request) -> Response:
        arrived = clock.now
        await request.body()
        await asyncio.sleep(0.005)  # a little real time, so the other replica polls meanwhile
        # The receiver's time, on the clock every lease is judged by; deliveries in parallel overlap.
        clock.now = max(clock.now, arrived + seconds)
        received[request.headers["webhook-id"]] += 1
        return Response(status_code=204)

    return Starlette(routes=[Route("/hooks", receive, methods=["POST"])])


@contextlib.asynccontextmanager
async def replicas(backend: str, clock: SimulatedClock) -> AsyncIterator[list[Store]]:
    keyring = KeyRing([("k1", KeyRing.generate_key())])
    with tempfile.TemporaryDirectory(prefix="bench-webhook-") as folder:
        url = f"sqlite:///{Path(folder) / 'store.sqlite3'}" if backend == "sqlite" else REDIS_URL
        prefix = f"bench-webhook-{secrets.token_hex(4)}:"
        stores = [await open_store(url, keyring, prefix=prefix, clock=clock) for _ in range(2)]
        try:
            yield stores
        finally:
            for store in stores:
                await store.close()


async def run(messages: int, receiver_seconds: float, backend: str) -> None:
    clock = SimulatedClock()
    received: collections.Counter[str] = collections.Counter()
    async with replicas(backend, clock) as stores:
        for n in range(messages):
            message = WebhookMessage(f"msg_{n:03d}", "connection.created", "{}", clock() + n * 1e-3, clock())
            await stores[0].enqueue_webhook(message)
        app = receiver(clock, receiver_seconds, received)
        clients = [httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) for _ in stores]
        senders = [
            WebhookSender(
                store,
                client,
                "http://127.0.0.1:9/hooks",
                "whsec_" + "A" * 43 + "=",
                timeout_seconds=SENDER_TIMEOUT_SECONDS,
                metrics=Metrics(),
                clock=clock,
            )
            for store, client in zip(stores, clients, strict=True)
        ]
        started, simulated_start = time.perf_counter(), clock()
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(sender.run(poll_seconds=0.001)) for sender in senders]
            # Until every message arrived and no delivery came for half a second (real time).
            seen, quiet_since = -1, time.perf_counter()
            while len(received) < messages or time.perf_counter() - quiet_since < 0.5:
                if sum(received.values()) != seen:
                    seen, quiet_since = sum(received.values()), time.perf_counter()
                await asyncio.sleep(0.05)
            for task in tasks:
                task.cancel()
        elapsed = time.perf_counter() - started
        for client in clients:
            await client.aclose()
    twice = sum(1 for count in received.values() if count > 1)
    print(f"backend {backend}: {messages} messages, receiver {receiver_seconds:g} s per delivery")
    print(f"  delivered more than once: {twice} of {messages}")
    print(f"  deliveries in all: {sum(received.values())}")
    print(f"  simulated time {clock() - simulated_start:.0f} s, real {elapsed:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--receiver-seconds", type=float, default=10.0)
    parser.add_argument("--backend", choices=("sqlite", "redis"), default="sqlite")
    args = parser.parse_args()
    asyncio.run(run(args.messages, args.receiver_seconds, args.backend))


if __name__ == "__main__":
    main()

"""A webhook receiver for tests: a small Starlette app that verifies each delivery with the
Standard Webhooks specification's own library (`standardwebhooks.Webhook.verify`) and keeps what
it accepted. `fail_next` answers that many deliveries with 500 first (to exercise retries);
`taking` = (clock, seconds) makes each delivery take that long on that clock (a slow receiver, at
no cost in real time)."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mock_providers.testing.servers import HOST, ThreadedServers, free_port
from tests.support.clock import MovableClock


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass
class Receiver:
    secret: str = field(default_factory=new_secret)
    accepted: list[dict[str, Any]] = field(default_factory=list)  # verified payloads, in order
    ids: list[str] = field(default_factory=list)  # webhook-id of each accepted delivery
    refused: int = 0  # deliveries whose signature did not verify
    fail_next: int = 0
    taking: tuple[MovableClock, float] | None = None
    url: str = ""  # where it listens, once started

    def app(self) -> Starlette:
        verifier = Webhook(self.secret)

        async def receive(request: Request) -> Response:
            arrived = self.taking[0]() if self.taking else 0.0
            body = await request.body()
            if self.taking is not None:
                clock, seconds = self.taking
                clock.advance_to(arrived + seconds)  # deliveries in parallel overlap, as at a real receiver
            try:
                payload = verifier.verify(body, dict(request.headers))
            except WebhookVerificationError:
                self.refused += 1
                return JSONResponse({"error": "bad signature"}, status_code=400)
            if self.fail_next > 0:
                self.fail_next -= 1
                return JSONResponse({"error": "try later"}, status_code=500)
            self.accepted.append(payload)
            self.ids.append(request.headers["webhook-id"])
            return JSONResponse({"ok": True})

        return Starlette(routes=[Route("/hooks", receive, methods=["POST"])])

    def of(self, event: str, sub: str) -> list[dict[str, Any]]:
        return [p for p in self.accepted if p["type"] == event and p["data"]["sub"] == sub]


@contextmanager
def serving() -> Iterator[Receiver]:
    """A Receiver listening on a loopback port (`receiver.url`) until the block ends."""
    receiver, port = Receiver(), free_port()
    servers = ThreadedServers([(receiver.app(), port)])
    servers.start()
    receiver.url = f"http://{HOST}:{port}/hooks"
    try:
        yield receiver
    finally:
        servers.stop()

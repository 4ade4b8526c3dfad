"""Store records one user leaves by asking "which account?" again and again on 2026-07-28.

A user with two MockHub accounts and a client that declares form mode calls a tool N times and
never answers; each call is answered with an InputRequiredResult whose requestState holds a
single-use nonce. Printed: the nonces the store then holds, on SQLite and (when it answers at
127.0.0.1:6379) on Redis.

    .venv/bin/python -m bench.account_questions [--calls 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import sqlite3
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import redis
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp_types import (
    ClientCapabilities,
    ElicitationCapability,
    FormElicitationCapability,
    UrlElicitationCapability,
)

from mock_providers.demo import build_demo
from mock_providers.testing.replicas import REDIS_URL
from service.flow.connect import ConnectFlow
from service.flow.lifecycle import TokenLifecycle
from service.mcp.broker import ConnectionBroker
from service.mcp.completion.hub import CompletionHub
from service.mcp.errors import ConnectionNeeded
from service.providers.outbound_http import OutboundHttp
from token_store import (
    Connection,
    ConnectionKey,
    KeyRing,
    RedisStore,
    SQLiteStore,
    Store,
    StoreUnavailable,
    TokenSet,
    UserRef,
)

FORM_AND_URL = ClientCapabilities(
    elicitation=ElicitationCapability(form=FormElicitationCapability(), url=UrlElicitationCapability())
)


async def ask(store: Store, data_dir: Path, calls: int) -> None:
    settings = build_demo("127.0.0.1", 9200, 9201, data_dir).settings
    outbound = OutboundHttp(1.0)
    broker = ConnectionBroker(
        settings,
        store,
        CompletionHub(),
        TokenLifecycle(store, outbound, timeout_seconds=1),
        ConnectFlow(settings, store, outbound, clock=time.time),
        outbound.client,
    )
    alice = UserRef(settings.auth_issuer, "alice")
    for account, label in (("1", "octocat"), ("2", "hubot")):
        tokens = TokenSet(secrets.token_urlsafe(8), expires_at=time.time() + 3600, scopes=("read:user",))
        await store.put_connection(
            Connection(ConnectionKey(alice, "mockhub", account), tokens, label, 1.0, 1.0)
        )
    token = AccessToken(token="t", client_id="c", scopes=[], subject="alice", claims={"iss": alice.iss})
    reset = auth_context_var.set(AuthenticatedUser(token))
    # What the SDK's Context gives the broker on a 2026-07-28 call without requestState.
    ctx = SimpleNamespace(
        protocol_version="2026-07-28",
        client_capabilities=FORM_AND_URL,
        session=None,
        request_id=1,
        request_state=None,
        input_responses=None,
        headers={},
    )
    try:
        for _ in range(calls):
            with contextlib.suppress(ConnectionNeeded):
                await broker.require(ctx, "mockhub")  # type: ignore[arg-type]
    finally:
        auth_context_var.reset(reset)
        await outbound.client.aclose()


async def main(calls: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="account-questions-"))
    keyring = KeyRing([("k1", KeyRing.generate_key())])
    sqlite_store = await SQLiteStore.open(root / "store.sqlite3", keyring)
    try:
        await ask(sqlite_store, root / "sqlite", calls)
    finally:
        await sqlite_store.close()
    with sqlite3.connect(root / "store.sqlite3") as db:
        held = db.execute("SELECT count(*) FROM nonces").fetchone()[0]
    print(f"SQLite: {calls} unanswered questions leave {held} nonce(s)")

    prefix = f"bench-questions-{secrets.token_hex(4)}:"
    try:
        redis_store = await RedisStore.open(REDIS_URL, keyring, prefix=prefix)
    except StoreUnavailable:
        print(f"Redis: not measured (nothing answers at {REDIS_URL})")
        return
    client = redis.Redis.from_url(REDIS_URL)
    try:
        await ask(redis_store, root / "redis", calls)
        held = sum(1 for _ in client.scan_iter(match=f"{prefix}nonce:*", count=1000))
        print(f"Redis:  {calls} unanswered questions leave {held} nonce key(s)")
    finally:
        await redis_store.close()
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            client.delete(key)
        client.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    asyncio.run(main(parser.parse_args().calls))

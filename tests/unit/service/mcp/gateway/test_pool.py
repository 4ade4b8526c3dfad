"""The per-user pool of downstream sessions and its bounds, in process: the kit's stand-in behind
an ASGI transport, the SDK's own client over it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import httpx2
import pytest

from mock_providers.providers.mcp_downstream.server import McpDownstream
from service.mcp.gateway.pool import Busy, DownstreamSessions
from service.providers.catalogue import ProviderConfig
from service.providers.outbound_http import OutboundHttp
from tests.support.settle import wait_until
from token_store import UserRef

BASE = "https://downstream.test"
ALICE, BOB = UserRef("https://as.example", "alice"), UserRef("https://as.example", "bob")
CAROL = UserRef("https://as.example", "carol")


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def running(stand_in: McpDownstream) -> AsyncIterator[tuple[DownstreamSessions, Clock]]:
    """The stand-in's session manager and a pool over an ASGI transport to it, in the test's own
    task (a task group entered in a fixture cannot be left in the test)."""
    clock = Clock()
    outbound = OutboundHttp(10, authlib_pool=httpx2.ASGITransport(app=stand_in.app))
    sessions = DownstreamSessions(outbound, clock=clock)
    async with stand_in.server.session_manager.run(), sessions.running():
        yield sessions, clock
    await outbound.aclose()


def provider(**limits: float) -> ProviderConfig:
    return ProviderConfig(name="down", kind="mcp", url=f"{BASE}/mcp", display_name="Down", **limits)


def token_for(stand_in: McpDownstream, user: UserRef) -> str:
    return stand_in.authorization._issue("client", ["read"], stand_in.url, user.sub).access_token


async def test_each_user_has_a_session_of_their_own_kept_for_the_next_call() -> None:
    stand_in = McpDownstream(BASE)
    async with running(stand_in) as (sessions, _):
        config = provider()
        alice = await sessions.open(config, ALICE, token_for(stand_in, ALICE))
        bob = await sessions.open(config, BOB, token_for(stand_in, BOB))
        assert alice is not bob and alice is await sessions.open(config, ALICE, alice.token.access_token)
        for session, user in ((alice, "alice"), (bob, "bob")):
            result = await sessions.call_tool(session, "whoami", {})
            assert result.structured_content is not None and result.structured_content["sub"] == user
    assert stand_in.calls == [("whoami", "alice"), ("whoami", "bob")]


async def test_calls_over_a_bound_are_refused_not_queued() -> None:
    stand_in = McpDownstream(BASE)
    async with running(stand_in) as (sessions, _):
        config = provider(max_calls_per_user=1, max_calls=2)
        alice = await sessions.open(config, ALICE, token_for(stand_in, ALICE))
        bob = await sessions.open(config, BOB, token_for(stand_in, BOB))
        carol = await sessions.open(config, CAROL, token_for(stand_in, CAROL))
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(sessions.call_tool, alice, "slow", {"seconds": 30})
            await wait_until(lambda: alice.in_flight, "alice's call in flight")
            with pytest.raises(Busy, match="too many of your calls"):
                await sessions.call_tool(alice, "echo", {"text": "x"})
            tasks.start_soon(sessions.call_tool, bob, "slow", {"seconds": 30})
            await wait_until(lambda: bob.in_flight, "bob's call in flight")
            with pytest.raises(Busy, match="is busy"):  # max_calls, across users
                await sessions.call_tool(carol, "echo", {"text": "x"})
            tasks.cancel_scope.cancel()


async def test_the_least_recently_used_idle_session_makes_room() -> None:
    stand_in = McpDownstream(BASE)
    async with running(stand_in) as (sessions, clock):
        config = provider(max_sessions=1)
        alice = await sessions.open(config, ALICE, token_for(stand_in, ALICE))
        clock.now += 1
        await sessions.open(config, BOB, token_for(stand_in, BOB))
        assert alice.closed and sessions.find("down", ALICE) is None


async def test_idle_sessions_are_closed() -> None:
    stand_in = McpDownstream(BASE)
    async with running(stand_in) as (sessions, clock):
        alice = await sessions.open(provider(session_idle_seconds=60), ALICE, token_for(stand_in, ALICE))
        clock.now += 30
        assert sessions.close_idle() == 0
        clock.now += 31
        assert sessions.close_idle() == 1
        assert alice.closed

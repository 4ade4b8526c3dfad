"""A remote MCP server that moves to another authorization server: followed once for every call
that sees its 401, under the start-up rules, never with a client registered at the old one."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from service.errors import ProviderApiError
from service.mcp.gateway.moves import RECHECK_SECONDS, AuthorizationServerMoves
from service.providers.catalogue import ProviderConfig, ProviderError, build_provider
from service.providers.protected_resource import Challenge

CHALLENGE = Challenge(status=401, error="invalid_token")


def resolved(at: str, **configured: Any) -> ProviderConfig:
    """`down` as discovery leaves it: resolved at the authorization server `at`, with the
    operator's own entry (`configured`: a pinned `issuer`, a `client_id`)."""
    table = {"kind": "mcp", "url": "https://down.example/mcp", **configured}
    operator = build_provider("down", table, {"MCPUC_PROVIDER_DOWN_CLIENT_SECRET": "s"})
    return build_provider(
        "down",
        {
            **table,
            "authorize_url": f"{at}/authorize",
            "token_url": f"{at}/token",
            "client_id": configured.get("client_id", f"registered-at-{at}"),
            "token_auth_method": "none",
            "issuer": at,
            "configured": operator,
        },
        {},
    )


class Downstream:
    """What the moves see of the downstream: whether it moved, and resolving it again."""

    def __init__(self, moved_to: str | None, refuse: str | None = None) -> None:
        self.moved_to = moved_to
        self.refuse = refuse
        self.checks = 0
        self.resolutions: list[ProviderConfig] = []

    async def moved(self, provider: ProviderConfig, challenge: Challenge) -> bool:
        self.checks += 1
        await anyio.lowlevel.checkpoint()  # the other calls arrive meanwhile
        return self.moved_to is not None and provider.issuer != self.moved_to

    async def resolve(self, provider: ProviderConfig) -> ProviderConfig:
        self.resolutions.append(provider)
        if self.refuse:
            raise ProviderError(self.refuse)
        assert self.moved_to is not None and provider.configured is not None
        pinned = provider.configured.model_dump(include={"issuer"}, exclude_none=True)
        return resolved(self.moved_to, **pinned)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def moves_for(
    downstream: Downstream,
    provider: ProviderConfig,
    clock: Clock,
    counted: list[tuple[str, str]] | None = None,
) -> AuthorizationServerMoves:
    def count(provider: str, outcome: str) -> None:
        if counted is not None:
            counted.append((provider, outcome))

    return AuthorizationServerMoves({"down": provider}, downstream.moved, downstream.resolve, clock, count)


async def test_a_move_is_followed_once_for_every_call_that_sees_it() -> None:
    old = resolved("https://as1.example")
    downstream = Downstream(moved_to="https://as2.example")
    counted: list[tuple[str, str]] = []
    moves = moves_for(downstream, old, Clock(), counted)
    answers: list[ProviderConfig | None] = []

    async def call() -> None:
        answers.append(await moves.follow(old, CHALLENGE))

    async with anyio.create_task_group() as tasks:
        for _ in range(10):
            tasks.start_soon(call)
    assert downstream.checks == 1 and len(downstream.resolutions) == 1
    assert downstream.resolutions[0].issuer == "https://as1.example"
    assert {a.issuer if a else None for a in answers} == {"https://as2.example"}
    assert moves.current(old).issuer == "https://as2.example"
    assert moves.current(old).client_id == "registered-at-https://as2.example"
    assert counted == [("down", "followed")]  # the operator sees one move, not ten
    # A later 401 on the new server's token: read again, not moved, handled as a refused token.
    assert await moves.follow(moves.current(old), CHALLENGE) is None


async def test_a_downstream_that_did_not_move_is_read_again_once_per_window() -> None:
    old = resolved("https://as1.example")
    downstream = Downstream(moved_to=None)
    clock = Clock()
    moves = moves_for(downstream, old, clock)
    assert await moves.follow(old, CHALLENGE) is None
    assert await moves.follow(old, CHALLENGE) is None
    assert downstream.checks == 1
    clock.now += RECHECK_SECONDS
    assert await moves.follow(old, CHALLENGE) is None
    assert downstream.checks == 2 and downstream.resolutions == []
    assert moves.current(old) is old


async def test_a_move_the_start_up_rules_refuse_fails_the_calls_and_keeps_the_entry() -> None:
    """A pinned issuer the metadata no longer lists (`choose_authorization_server`), or any other
    start-up rule broken at the new server: not followed, and not resolved again at every call."""
    old = resolved("https://as1.example", issuer="https://as1.example")
    downstream = Downstream(moved_to="https://as2.example", refuse="does not list the pinned issuer")
    clock = Clock()
    counted: list[tuple[str, str]] = []
    moves = moves_for(downstream, old, clock, counted)
    for _ in range(3):
        with pytest.raises(ProviderApiError, match="moved to another authorization server"):
            await moves.follow(old, CHALLENGE)
    assert len(downstream.resolutions) == 1
    assert moves.current(old) is old
    clock.now += RECHECK_SECONDS
    with pytest.raises(ProviderApiError):
        await moves.follow(old, CHALLENGE)
    assert len(downstream.resolutions) == 2
    assert counted == [("down", "refused")] * 2  # once per check, not once per call


async def test_a_client_registered_beforehand_is_never_taken_to_another_server() -> None:
    """SEP-2352: credentials are not portable across authorization servers. The operator's
    `client_id` was registered at the old server: nothing is resolved with it at the new one."""
    old = resolved("https://as1.example", client_id="operators-client")
    downstream = Downstream(moved_to="https://as2.example")
    moves = moves_for(downstream, old, Clock())
    with pytest.raises(ProviderApiError, match="moved to another authorization server"):
        await moves.follow(old, CHALLENGE)
    assert downstream.resolutions == []
    assert moves.current(old) is old

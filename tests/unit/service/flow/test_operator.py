"""service/flow/operator.py on SQLite, without servers: the incident switch is paced and resumable, a
user is (iss, sub) and never a `sub` at another issuer, the user's flows in progress end."""

from __future__ import annotations

import base64
import time

import anyio
import pytest

from service.errors import UnknownProvider
from service.flow.connect import ConnectFlow
from service.flow.operator import Operator
from service.providers.catalogue import ProviderConfig
from service.providers.outbound_http import OutboundHttp
from service.settings import Settings
from token_store import (
    Connection,
    ConnectionKey,
    ElicitationStatus,
    PendingElicitation,
    Store,
    TokenSet,
    UserRef,
)

ISSUER, OTHER_ISSUER = "https://as.example.com", "https://other-as.example.com"
# No revocation endpoint: each removal is local only (what the provider says is tested end to end).
HUB = ProviderConfig(
    name="hub",
    authorize_url="https://hub.example/authorize",
    token_url="https://hub.example/token",
    userinfo_url="https://hub.example/user",
    client_id="c",
    client_secret="s",
)


def settings() -> Settings:
    key = base64.urlsafe_b64encode(b"K" * 32).decode().rstrip("=")
    return Settings(
        public_url="https://mcp.example.com",
        auth_issuer=ISSUER,
        login_client_id="mcp-login",
        login_client_secret="login-client-secret-value",
        session_secret="session-secret-" + "s" * 32,
        encryption_keys=f"k1:{key}",
        request_state_keys=key,
        providers={"hub": HUB},
    )


class PacedClock:
    """A monotonic clock that only `sleep` moves: the pacing is read off the sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await anyio.lowlevel.checkpoint()


def operator_on(store: Store, clock: PacedClock | None = None) -> Operator:
    clock = clock or PacedClock()
    flow = ConnectFlow(settings(), store, OutboundHttp(1.0), clock=time.time)
    return Operator(
        store,
        {"hub": HUB},
        OutboundHttp(1.0),
        flow,
        default_issuer=ISSUER,
        clock=clock,
        sleep=clock.sleep,
    )


async def seed(store: Store, users: list[UserRef], provider: str = "hub") -> None:
    for i, user in enumerate(users):
        key = ConnectionKey(user, provider, str(i))
        await store.put_connection(Connection(key, TokenSet(f"tok-{i}"), f"acct-{i}", 1.0, 1.0))


async def test_revoke_provider_starts_at_most_rate_per_second(store: Store) -> None:
    await seed(store, [UserRef(ISSUER, f"u{i}") for i in range(21)])
    clock = PacedClock()
    removal = await operator_on(store, clock).revoke_provider("test", "hub", rate=10)
    assert (removal.matched, len(removal.deleted)) == (21, 21)
    assert clock.now == pytest.approx(2.0)  # the 21st starts 20 / 10 s after the first
    assert await store.find_connections("hub") == []


async def test_revoke_provider_interrupted_then_run_again_removes_the_rest_once(store: Store) -> None:
    users = [UserRef(ISSUER, f"u{i}") for i in range(30)]
    await seed(store, users)
    clock = PacedClock()
    operator = operator_on(store, clock)
    stop_after = 10

    async def interrupted_sleep(seconds: float) -> None:  # Ctrl-C at the 10th pause
        if len(clock.sleeps) == stop_after:
            raise KeyboardInterrupt
        await clock.sleep(seconds)

    operator._sleep = interrupted_sleep
    with pytest.raises(BaseExceptionGroup):
        await operator.revoke_provider("test", "hub", rate=10)
    operator._sleep = clock.sleep
    left = await store.find_connections("hub")
    assert 0 < len(left) < len(users)
    dry = await operator.revoke_provider("test", "hub", dry_run=True)
    assert (dry.matched, dry.deleted) == (len(left), [])
    second = await operator.revoke_provider("test", "hub", rate=1000)
    assert {row["sub"] for row in second.deleted} == {c.key.user.sub for c in left}
    assert await store.find_connections("hub") == []


async def test_revoke_user_is_iss_and_sub_never_the_same_sub_elsewhere(store: Store) -> None:
    await seed(store, [UserRef(ISSUER, "alice"), UserRef(OTHER_ISSUER, "alice"), UserRef(ISSUER, "bob")])
    removal = await operator_on(store).revoke_user("test", "alice")
    assert [(r["iss"], r["sub"]) for r in removal.deleted] == [(ISSUER, "alice")]
    left = {(c.key.user.iss, c.key.user.sub) for c in await store.find_connections()}
    assert left == {(OTHER_ISSUER, "alice"), (ISSUER, "bob")}
    removal = await operator_on(store).revoke_user("test", "alice", iss=OTHER_ISSUER)
    assert [(r["iss"], r["sub"]) for r in removal.deleted] == [(OTHER_ISSUER, "alice")]


async def test_revoke_user_ends_their_flows_in_progress_only(store: Store) -> None:
    now = time.time()

    def flow(sub: str, flow_id: str) -> PendingElicitation:
        return PendingElicitation(
            flow_id, UserRef(ISSUER, sub), "client", "session", "hub", (), now, now + 600
        )

    for elicitation in (flow("alice", "a1"), flow("alice", "a2"), flow("bob", "b1")):
        await store.create_elicitation(elicitation, max_live_per_user=5)
    removal = await operator_on(store).revoke_user("test", "alice")
    assert removal.flows_ended == 2
    statuses = {i: (await store.get_elicitation(i)).status for i in ("a1", "a2", "b1")}  # type: ignore[union-attr]
    assert statuses == {
        "a1": ElicitationStatus.FAILED,
        "a2": ElicitationStatus.FAILED,
        "b1": ElicitationStatus.PENDING,
    }


async def test_an_unknown_provider_is_named(store: Store) -> None:
    with pytest.raises(UnknownProvider, match="'nope'"):
        await operator_on(store).revoke_provider("test", "nope")
    with pytest.raises(UnknownProvider, match="'nope'"):
        await operator_on(store).revoke_user("test", "alice", provider="nope")

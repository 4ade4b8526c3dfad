"""Connection health webhooks end to end: two replicas sharing Redis send each event once, signed,
to a real receiver on loopback that verifies every delivery with the Standard Webhooks library
(tests/support/webhook_receiver.py). Another user's connection stays as it was."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from mock_providers.testing.replicas import (
    LifecycleStack,
    connect,
    elicitation_of,
    expire_stored,
    legacy_client,
)
from service.ops.cli import main
from tests.support.lifecycle import running
from tests.support.settle import quiet_for, wait_until
from tests.support.webhook_receiver import Receiver
from token_store import Store

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[LifecycleStack]:
    overrides = {"webhook_url": receiver.url, "webhook_secret": receiver.secret}
    yield from running(LifecycleStack(tmp_path_factory.mktemp("webhooks"), settings_overrides=overrides))


async def delivered(receiver: Receiver, event: str, sub: str) -> dict[str, Any]:
    await wait_until(lambda: bool(receiver.of(event, sub)), f"{event} for {sub}")
    [payload] = receiver.of(event, sub)
    return payload


async def test_a_connections_life_is_told_once_per_event_and_never_with_a_token(
    stack: LifecycleStack, store: Store, receiver: Receiver
) -> None:
    user, other, hub = "hooked-user", "hooked-other", stack.mockhub
    await connect(stack.instances[0], user, login="hooked-login")
    await connect(stack.instances[1], other, login="hooked-other-login")
    created = await delivered(receiver, "connection.created", user)
    assert created["data"]["account_label"] == "hooked-login" and created["data"]["status"] == "ok"
    first = await store.get_connection(stack.user(user), "mockhub")
    assert first is not None

    # The provider revokes the grant: the next refresh gets invalid_grant.
    hub.revoke_grant("hooked-login")
    await expire_stored(store, stack.user(user), "mockhub")
    async with legacy_client(stack.instances[1], user) as (client, _):
        await elicitation_of(client, "whoami")
    dead = await delivered(receiver, "connection.needs_reauthorization", user)
    assert dead["data"]["status"] == "needs_reauthorization"

    await connect(stack.instances[1], user, login="hooked-login")  # the user connects again
    await delivered(receiver, "connection.recovered", user)
    second = await store.get_connection(stack.user(user), "mockhub")
    assert second is not None

    async with legacy_client(stack.instances[0], user) as (client, _):
        assert not (await client.call_tool("disconnect", {"provider": "mockhub"})).is_error
    gone = await delivered(receiver, "connection.deleted", user)
    assert gone["data"]["reason"] == "user"

    await quiet_for(2.5, "two more sweeps of each replica's sender: nothing is sent twice")
    assert len(receiver.ids) == len(set(receiver.ids))
    assert [p["type"] for p in receiver.accepted if p["data"]["sub"] == user] == [
        "connection.created",
        "connection.needs_reauthorization",
        "connection.recovered",
        "connection.deleted",
    ]
    assert receiver.refused == 0
    everything = json.dumps(receiver.accepted)
    for held in (first, second):
        for secret in (held.tokens.access_token, held.tokens.refresh_token):
            assert secret is not None and secret not in everything
    kept = await store.get_connection(stack.user(other), "mockhub")
    assert kept is not None and kept.status.value == "ok"
    assert [p["type"] for p in receiver.accepted if p["data"]["sub"] == other] == ["connection.created"]


async def test_operator_removals_are_told_with_their_reason(
    stack: LifecycleStack, store: Store, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    leaver, incident = "hooked-leaver", "hooked-incident"
    await connect(stack.instances[0], leaver, login="hooked-leaver-login")
    await connect(stack.instances[1], incident, login="hooked-incident-login")
    monkeypatch.setattr("service.ops.cli.preamble.load_settings", lambda **_: stack.settings)
    assert await anyio.to_thread.run_sync(main, ["connections", "revoke", "--user", leaver]) == 0
    assert (await delivered(receiver, "connection.deleted", leaver))["data"]["reason"] == "operator"
    argv = ["connections", "revoke", "--provider", "mockhub", "--all", "--rate", "100"]
    assert await anyio.to_thread.run_sync(main, argv) == 0
    assert (await delivered(receiver, "connection.deleted", incident))["data"]["reason"] == "revocation"
    assert await store.find_connections("mockhub") == []

"""CompletionHub: delivery goes to the registered session only when the record names it (invariant 7)."""

from __future__ import annotations

from dataclasses import replace

import anyio

from service.completion import CompletionHub
from token_store import PendingElicitation, UserRef


class FakeSession:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send_elicit_complete(self, elicitation_id: str) -> None:
        self.sent.append(elicitation_id)


def elicitation(session_id: str | None = "session-a", expires_at: float = 10_000.0) -> PendingElicitation:
    return PendingElicitation(
        id="e" * 43,
        user=UserRef("https://as", "alice"),
        client_id="client",
        mcp_session_id=session_id,
        provider="mockhub",
        scopes=(),
        created_at=0.0,
        expires_at=expires_at,
    )


async def test_delivers_to_the_registered_session_once() -> None:
    hub, session = CompletionHub(clock=lambda: 1.0), FakeSession()
    hub.register(elicitation(), session)
    assert await hub.completed(elicitation()) is True
    assert await hub.completed(elicitation()) is False
    assert session.sent == ["e" * 43]


async def test_a_record_naming_another_session_is_not_delivered() -> None:
    hub, session = CompletionHub(clock=lambda: 1.0), FakeSession()
    hub.register(elicitation("session-a"), session)
    assert await hub.completed(replace(elicitation(), mcp_session_id="session-b")) is False
    assert session.sent == []


async def test_expired_registrations_are_purged() -> None:
    now = [1.0]
    hub, session = CompletionHub(clock=lambda: now[0]), FakeSession()
    hub.register(elicitation(expires_at=5.0), session)
    now[0] = 6.0
    assert await hub.completed(elicitation(expires_at=5.0)) is False
    assert session.sent == []


async def test_a_stateless_waiter_is_woken_and_leaves_nothing_behind() -> None:
    hub = CompletionHub(clock=lambda: 1.0)
    record = elicitation(session_id=None)
    woke = anyio.Event()

    async def waiter() -> None:
        await hub.wait(record, 5.0)
        woke.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.sleep(0.05)
        assert await hub.completed(record) is False  # no session to notify, but the waiter wakes
    assert woke.is_set()
    await hub.wait(record, 0.01)  # times out
    assert hub._entries == {}

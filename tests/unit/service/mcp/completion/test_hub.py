"""CompletionHub: delivery goes to the registered session only when the record names it (invariant 7)."""

from __future__ import annotations

from dataclasses import replace

import anyio

from service.mcp.completion.hub import CompletionHub
from tests.support.completion import FakeSession, elicitation
from token_store import ElicitationStatus, PendingElicitation, UserRef

ALICE = elicitation().user


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
        await anyio.wait_all_tasks_blocked()  # the waiter waits
        assert await hub.completed(record) is False  # no session to notify, but the waiter wakes
    assert woke.is_set()
    await hub.wait(record, 0.01)  # times out
    assert hub._entries == {}


# ---- every way a flow ends reaches the session ----------------------------------------------


def failed(record: PendingElicitation, failure: str | None) -> PendingElicitation:
    return replace(record, status=ElicitationStatus.FAILED, failure=failure)


async def test_a_failed_flow_is_notified_and_its_reason_is_reported_once() -> None:
    hub, session = CompletionHub(clock=lambda: 1.0), FakeSession()
    hub.register(elicitation(), session)
    assert await hub.completed(failed(elicitation(), "denied")) is True
    assert session.sent == ["e" * 43]
    failure = hub.take_failure(ALICE, "session-a", "mockhub")
    assert failure is not None and failure.outcome == "denied"
    assert hub.take_failure(ALICE, "session-a", "mockhub") is None  # once: the next call asks again
    assert hub.take_failure(ALICE, "session-b", "mockhub") is None
    assert hub.failure_of("e" * 43) == "denied"


async def test_a_failure_is_reported_only_to_the_user_whose_flow_it_was() -> None:
    """Bob naming Alice's session id never takes her notice; she still gets it."""
    hub = CompletionHub(clock=lambda: 1.0)
    hub.register(elicitation(), FakeSession())
    await hub.completed(failed(elicitation(), "denied"))
    assert hub.take_failure(UserRef(ALICE.iss, "bob"), "session-a", "mockhub") is None
    assert hub.take_failure(UserRef("https://other-as", ALICE.sub), "session-a", "mockhub") is None
    failure = hub.take_failure(ALICE, "session-a", "mockhub")
    assert failure is not None and failure.outcome == "denied"


async def test_an_expired_flow_is_notified_by_the_sweep() -> None:
    now = [1.0]
    hub, session = CompletionHub(clock=lambda: now[0]), FakeSession()
    expired: list[str] = []
    hub.on_expired = lambda e: expired.append(e.id)
    hub.register(elicitation(expires_at=5.0), session)
    assert await hub.expire_due() == 0
    now[0] = 5.0
    # Another flow's activity purges it first: the sweep still tells its session.
    hub.register(replace(elicitation(expires_at=50.0), id="f" * 43), FakeSession())
    assert await hub.expire_due() == 1
    assert session.sent == ["e" * 43] and expired == ["e" * 43]
    failure = hub.take_failure(ALICE, "session-a", "mockhub")
    assert failure is not None and failure.outcome == "expired"


async def test_resync_delivers_what_the_store_says_has_ended() -> None:
    hub, session, other = CompletionHub(clock=lambda: 1.0), FakeSession(), FakeSession()
    done = elicitation()
    live = replace(elicitation(), id="f" * 43)
    hub.register(done, session)
    hub.register(live, other)
    stored = {done.id: replace(done, status=ElicitationStatus.COMPLETE), live.id: live}

    async def read(elicitation_id: str) -> PendingElicitation | None:
        return stored.get(elicitation_id)

    assert await hub.resync(read) == 1
    assert session.sent == ["e" * 43] and other.sent == []
    assert [e.id for e in hub.pending()] == ["f" * 43]


async def test_many_pending_flows_purge_in_expiry_order() -> None:
    now = [0.0]
    hub = CompletionHub(clock=lambda: now[0])
    for i in range(1000):
        hub.register(replace(elicitation(expires_at=float(i)), id=f"{i:043d}"), FakeSession())
    now[0] = 499.5
    await hub.expire_due()
    assert len(hub.pending()) == 500

"""Helpers for the completion hub's tests: a session that records notifications, a record."""

from __future__ import annotations

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

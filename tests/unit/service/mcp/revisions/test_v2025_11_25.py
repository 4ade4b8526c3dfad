"""service/mcp/revisions/v2025_11_25.py: a connect question is error -32042 naming the elicitation, and the
session that asked is registered for the completion notice."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from mcp.shared.exceptions import UrlElicitationRequiredError

from service.mcp.completion.hub import CompletionHub
from service.mcp.identity import Caller
from service.mcp.revisions.capabilities import LEGACY_REVISION
from service.mcp.revisions.v2025_11_25 import LegacyAnswers
from tests.support.store_contract import ALICE, FakeClock, make_elicitation


async def test_a_connect_question_is_32042_and_registers_the_session() -> None:
    hub = CompletionHub(FakeClock())
    answers = LegacyAnswers(hub)
    elicitation = make_elicitation()
    ctx: Any = SimpleNamespace(session=object())
    error = await answers.ask_connect(ctx, elicitation, "Connect GitHub", "https://mcp.example/connect?x")
    assert isinstance(error, UrlElicitationRequiredError) and error.code == -32042
    [asked] = error.elicitations
    assert (asked.url, asked.elicitation_id, asked.message) == (
        "https://mcp.example/connect?x",
        elicitation.id,
        "Connect GitHub",
    )
    assert hub.pending() == [elicitation]
    assert answers.revision == LEGACY_REVISION
    assert answers.session_of(Caller(ALICE, "client-1", "session-1")) == "session-1"

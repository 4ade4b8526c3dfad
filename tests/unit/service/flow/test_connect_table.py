"""docs/flow.md, "Elicitation status machine", `token_store.Transition` and `TRANSITIONS` in
service/flow/connect.py are the same table; and the flow refuses any status change outside it
(every backend does too: tests/integration/token_store/test_store_contract.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mock_providers.demo import build_demo
from service.errors import UnknownTransition
from service.flow.connect import TRANSITIONS, ConnectFlow
from service.providers.outbound_http import OutboundHttp
from token_store import ElicitationStatus, Transition

FLOW_MD = Path(__file__).resolve().parents[4] / "docs" / "flow.md"


def section(title: str) -> str:
    text = FLOW_MD.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def documented_diagram() -> set[tuple[ElicitationStatus, ElicitationStatus]]:
    """`a --> b` lines of the mermaid diagram, leaving out creation and expiry (`[*]`)."""
    pairs = re.findall(r"^\s*(\w+) --> (\w+)\s*:", section("Elicitation status machine"), re.MULTILINE)
    return {(ElicitationStatus(a), ElicitationStatus(b)) for a, b in pairs}


def documented_table() -> set[tuple[ElicitationStatus, ElicitationStatus]]:
    """The first column of the table: `` `a → b` `` (the `→ pending` creation row has no source)."""
    pairs = re.findall(r"^\| `(\w+) → (\w+)` \|", section("Elicitation status machine"), re.MULTILINE)
    return {(ElicitationStatus(a), ElicitationStatus(b)) for a, b in pairs}


def test_the_documented_status_machine_is_the_one_in_code() -> None:
    pairs = {transition.value for transition in Transition}
    assert documented_diagram() == pairs
    assert documented_table() == pairs


def test_the_flow_says_who_makes_every_transition() -> None:
    assert set(TRANSITIONS) == set(Transition)


def test_the_table_names_the_flow_functions() -> None:
    text = section("Elicitation status machine")
    for function in ("create", "open", "open_with_api_key", "decline", "complete", "fail", "finish"):
        assert f"ConnectFlow.{function}`" in text


async def test_a_transition_outside_the_table_is_refused(tmp_path: Path) -> None:
    settings = build_demo("127.0.0.1", 9400, 9401, tmp_path).settings

    class NoStore:
        def __getattr__(self, operation: str) -> object:
            raise AssertionError("the store must not be reached")

    flow = ConnectFlow(settings, NoStore(), OutboundHttp(1.0), clock=lambda: 0.0)  # type: ignore[arg-type]
    for old in ElicitationStatus:
        for new in ElicitationStatus:
            if (old, new) in {transition.value for transition in Transition}:
                continue
            with pytest.raises(UnknownTransition):
                await flow._transition("e" * 43, old, new)

"""RequestState: the plaintext inside the SDK-sealed requestState of the 2026-07-28 revision."""

from __future__ import annotations

import json

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from service.mcp.errors import mcp_errors
from service.mcp.revisions.v2026_07_28 import RequestState


@pytest.mark.parametrize(
    "state",
    [
        RequestState("elc_0123456789abcdef", "nonce-value", "mockhub"),
        RequestState('id with spaces & "quotes"', "n\u00e9\u2603", "provider/with/slashes"),
        RequestState("", "", ""),
    ],
)
def test_round_trip(state: RequestState) -> None:
    raw = state.dumps()
    assert isinstance(raw, str)
    assert RequestState.loads(raw) == state


def test_dumps_is_versioned_json() -> None:
    data = json.loads(RequestState("e1", "n1", "p1").dumps())
    assert data == {"v": 1, "e": "e1", "n": "n1", "p": "p1"}


MALFORMED: dict[str, str] = {
    "not json": "SECRETINPUT not json at all",
    "truncated json": '{"v": 1, "e": "SECRETINPUT"',
    "empty": "",
    "wrong version": json.dumps({"v": 2, "e": "SECRETINPUT", "n": "n", "p": "p"}),
    "version as string": json.dumps({"v": "1", "e": "SECRETINPUT", "n": "n", "p": "p"}),
    "no version": json.dumps({"e": "SECRETINPUT", "n": "n", "p": "p"}),
    "missing elicitation id": json.dumps({"v": 1, "n": "SECRETINPUT", "p": "p"}),
    "missing nonce": json.dumps({"v": 1, "e": "SECRETINPUT", "p": "p"}),
    "missing provider": json.dumps({"v": 1, "e": "SECRETINPUT", "n": "n"}),
    "json list": json.dumps([1, "SECRETINPUT", "n", "p"]),
    "json string": json.dumps("SECRETINPUT"),
    "json null": "null",
    "json number": "1",
}


@pytest.mark.parametrize("raw", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_input_is_invalid_params_without_echo(raw: str) -> None:
    with pytest.raises(MCPError) as caught, mcp_errors():
        RequestState.loads(raw)
    error = caught.value
    assert error.code == INVALID_PARAMS
    assert "requestState" in error.message
    assert "SECRETINPUT" not in error.message
    assert "SECRETINPUT" not in str(error)
    assert error.data is None

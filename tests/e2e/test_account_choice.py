"""Several accounts at one provider, end to end with the kit: the SDK `Client` answers the form-mode
"which account?" on both revisions; decline and cancel; "connect another account"; the remembered
default; a client without form support; the 2026-07-28 requestState of the question.

Alice connects two MockHub accounts (octocat, then hubot) by naming each with `account=`; the
calls that name none are the subject.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import URL_ELICITATION_REQUIRED

from mock_providers.testing import MODES, Mcpuc
from mock_providers.testing.client import Recorder

Answer = Callable[[Any], mcp_types.ElicitResult]
TITLES = ["hubot", "octocat", "Connect another account"]


async def connect_two(mcpuc: Mcpuc, user: str, mode: str) -> None:
    async with mcpuc.client(user, mode=mode) as client:
        for login in ("octocat", "hubot"):
            args = {"account": login}
            link = await mcpuc.connect_url(client, "whoami", args)
            await mcpuc.browser(user).approve(link.url, login=login)
            result = await mcpuc.retry(client, link, "whoami", args)
            assert result.structured_content["login"] == login


def choose(title: str) -> Answer:
    """Answer the form with the option titled `title` (and accept any URL elicitation)."""

    def answer(params: Any) -> mcp_types.ElicitResult:
        if params.mode == "url":
            return mcp_types.ElicitResult(action="accept")
        [field] = params.requested_schema["properties"].values()
        value = next(o["const"] for o in field["oneOf"] if o["title"] == title)
        return mcp_types.ElicitResult(action="accept", content={"account": value})

    return answer


def refuse(action: str) -> Answer:
    return lambda params: mcp_types.ElicitResult(action=action)  # type: ignore[arg-type]


@asynccontextmanager
async def form_client(
    mcpuc: Mcpuc, user: str, mode: str, answer: Answer
) -> AsyncIterator[tuple[Client, list[Any], Recorder]]:
    """The SDK client with an elicitation callback that answers forms (it declares form and URL)."""
    asked: list[Any] = []
    recorder = Recorder()

    async def callback(ctx: Any, params: Any) -> mcp_types.ElicitResult:
        asked.append(params)
        return answer(params)

    bearer = {"Authorization": f"Bearer {mcpuc.token(user)}"}
    async with (
        httpx2.AsyncClient(headers=bearer, timeout=30) as http,
        Client(
            streamable_http_client(mcpuc.mcp_url, http_client=http),
            mode=mode,  # type: ignore[arg-type]
            message_handler=recorder.on_message,
            elicitation_callback=callback,
        ) as client,
    ):
        yield client, asked, recorder


def forms(asked: list[Any]) -> list[Any]:
    return [p for p in asked if p.mode == "form"]


def titles(params: Any) -> list[str]:
    [field] = params.requested_schema["properties"].values()
    return [o["title"] for o in field["oneOf"]]


@pytest.mark.parametrize("mode", MODES)
async def test_asked_once_then_remembered(mcpuc: Mcpuc, mode: str) -> None:
    await connect_two(mcpuc, "alice", mode)
    async with form_client(mcpuc, "alice", mode, choose("octocat")) as (client, asked, _):
        result = await client.call_tool("whoami", {})
        assert result.structured_content["login"] == "octocat"
        [form] = forms(asked)
        assert titles(form) == TITLES
        assert "several MockHub accounts" in form.message
        again = await client.call_tool("whoami", {})
        assert again.structured_content["login"] == "octocat"
        assert len(forms(asked)) == 1  # remembered: not asked again
    # Remembered for the user, not the session.
    async with form_client(mcpuc, "alice", mode, choose("hubot")) as (client, asked, _):
        result = await client.call_tool("whoami", {})
        assert result.structured_content["login"] == "octocat"
        assert asked == []


@pytest.mark.parametrize("mode", MODES)
async def test_the_form_asks_nothing_secret_and_no_free_text(mcpuc: Mcpuc, mode: str) -> None:
    await connect_two(mcpuc, "alice", mode)
    async with form_client(mcpuc, "alice", mode, choose("hubot")) as (client, asked, _):
        await client.call_tool("whoami", {})
    [form] = forms(asked)
    schema = form.requested_schema
    assert list(schema["properties"]) == ["account"] and schema["required"] == ["account"]
    for field in schema["properties"].values():
        assert field["type"] == "string" and "format" not in field
        assert all(set(option) == {"const", "title"} for option in field["oneOf"])
    for word in ("password", "token", "secret", "key"):
        assert word not in str(schema).lower()


@pytest.mark.parametrize("action", ["decline", "cancel"])
@pytest.mark.parametrize("mode", MODES)
async def test_decline_or_cancel_ends_the_call(mcpuc: Mcpuc, mode: str, action: str) -> None:
    await connect_two(mcpuc, "alice", mode)
    async with form_client(mcpuc, "alice", mode, refuse(action)) as (client, asked, _):
        result = await client.call_tool("whoami", {})
        assert result.is_error
        assert "No MockHub account was chosen" in result.content[0].text  # type: ignore[union-attr]
        assert result.structured_content is None
        await client.call_tool("whoami", {})
        assert len(forms(asked)) == 2  # nothing remembered: asked again


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_without_form_support_is_told_which_account(
    mcpuc: Mcpuc, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await connect_two(mcpuc, "alice", mode)
    build = ClientSession._build_capabilities

    def url_only(self: ClientSession, version: str) -> mcp_types.ClientCapabilities:
        url = mcp_types.ElicitationCapability(url=mcp_types.UrlElicitationCapability())
        return build(self, version).model_copy(update={"elicitation": url})

    monkeypatch.setattr(ClientSession, "_build_capabilities", url_only)
    async with mcpuc.client("alice", mode=mode) as client:
        result = await client.call_tool("whoami", {})
    assert not result.is_error
    assert result.structured_content["login"] == "hubot"  # the most recently used, as before
    notice = result.content[-1].text  # type: ignore[union-attr]
    assert "'hubot'" in notice and "account=" in notice


async def test_connect_another_account_legacy(mcpuc: Mcpuc) -> None:
    await connect_two(mcpuc, "alice", "legacy")
    async with form_client(mcpuc, "alice", "legacy", choose("Connect another account")) as (
        client,
        asked,
        recorder,
    ):
        with pytest.raises(MCPError) as raised:
            await client.call_tool("whoami", {})
        assert raised.value.error.code == URL_ELICITATION_REQUIRED
        [link] = UrlElicitationRequiredError.from_error(raised.value.error).elicitations
        await mcpuc.browser("alice").approve(link.url, login="monalisa")
        await recorder.wait_completed(str(link.elicitation_id))
        result = await client.call_tool("whoami", {"account": "monalisa"})
        assert result.structured_content["login"] == "monalisa"
    # The next call without an account asks again, the new account among the options.
    async with form_client(mcpuc, "alice", "legacy", choose("monalisa")) as (client, asked, _):
        result = await client.call_tool("whoami", {})
        assert result.structured_content["login"] == "monalisa"
        [form] = forms(asked)
        assert titles(form) == ["hubot", "monalisa", "octocat", "Connect another account"]


async def test_connect_another_account_2026(mcpuc: Mcpuc) -> None:
    mode = "2026-07-28"
    await connect_two(mcpuc, "alice", mode)
    async with form_client(mcpuc, "alice", mode, refuse("cancel")) as (client, _, _):
        first = await client.session.call_tool("whoami", {}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult)
        [(key, question)] = (first.input_requests or {}).items()
        assert key == "account" and question.params.mode == "form"  # type: ignore[union-attr]
        new = choose("Connect another account")(question.params)
        second = await client.session.call_tool(
            "whoami",
            {},
            allow_input_required=True,
            input_responses={"account": new},
            request_state=first.request_state,
        )
        assert isinstance(second, mcp_types.InputRequiredResult)
        [(key, connect)] = (second.input_requests or {}).items()
        assert key == "connect" and connect.params.mode == "url"  # type: ignore[union-attr]
        await mcpuc.browser("alice").approve(connect.params.url, login="monalisa")  # type: ignore[union-attr]
        done = await client.session.call_tool(
            "whoami",
            {},
            allow_input_required=True,
            input_responses={"connect": mcp_types.ElicitResult(action="accept")},
            request_state=second.request_state,
        )
        assert isinstance(done, mcp_types.CallToolResult)
        assert done.structured_content["login"] == "monalisa"  # type: ignore[index]


async def test_the_question_state_is_bound_to_its_user_and_used_once(mcpuc: Mcpuc) -> None:
    mode = "2026-07-28"
    await connect_two(mcpuc, "alice", mode)
    async with form_client(mcpuc, "alice", mode, refuse("cancel")) as (alice, _, _):
        first = await alice.session.call_tool("whoami", {}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult)
        [question] = (first.input_requests or {}).values()
        answer = {"account": choose("octocat")(question.params)}
        # Mallory replays Alice's question state with Alice's answer: refused.
        async with form_client(mcpuc, "mallory", mode, refuse("cancel")) as (mallory, _, _):
            with pytest.raises(MCPError):
                await mallory.session.call_tool(
                    "whoami",
                    {},
                    allow_input_required=True,
                    input_responses=answer,
                    request_state=first.request_state,
                )
        ok = await alice.session.call_tool(
            "whoami", {}, allow_input_required=True, input_responses=answer, request_state=first.request_state
        )
        assert isinstance(ok, mcp_types.CallToolResult)
        assert ok.structured_content["login"] == "octocat"  # type: ignore[index]
        with pytest.raises(MCPError) as replayed:
            await alice.session.call_tool(
                "whoami",
                {},
                allow_input_required=True,
                input_responses=answer,
                request_state=first.request_state,
            )
        assert "already used" in replayed.value.error.message

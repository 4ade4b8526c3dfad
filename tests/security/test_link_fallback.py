"""The link in a tool error, for a client that declared no URL-mode elicitation: each capability
shape real clients send, on both revisions; the same link while it is unopened, and only for the
user and client that asked for it (2025-11-25/client-elicitation.mdx "Security Considerations":
"Servers MUST bind elicitation requests to the client and user identity")."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

import httpx
import pytest

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import MODES
from tests.security.attack import Servers, attack, elicitation_status, unique
from tests.security.flows import bearer, connect_fully, continue_to_provider, open_link, seed_connection
from tests.security.rpc import RawMcp

# What clients declare (docs/clients.md): an empty `elicitation` means form mode only.
NO_URL_MODE: dict[str, dict[str, Any]] = {
    "no elicitation": {},
    "elicitation {}": {"elicitation": {}},
    "form": {"elicitation": {"form": {}}},
}
URL_MODE: dict[str, dict[str, Any]] = {
    "url": {"elicitation": {"url": {}}},
    "form and url": {"elicitation": {"form": {}, "url": {}}},
}


async def client(servers: Servers, http: httpx.AsyncClient, mode: str, user: str, **declared: Any) -> RawMcp:
    capabilities = declared.pop("capabilities")
    raw = RawMcp(servers, http, mode, bearer(servers, user, **declared), capabilities=capabilities)
    if mode == "legacy":
        response = await raw.open()
        assert response.status_code == 200, response.text[:300]
    return raw


def link_of(answer: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(text, connect_url, structuredContent) of a fallback answer, which must be a tool error."""
    result = answer["result"]
    assert result.get("isError") is True, answer
    [content] = result["content"]
    structured = result["structuredContent"]
    return content["text"], structured["connect_url"], structured


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", sorted(NO_URL_MODE))
async def test_link_in_tool_error_for_each_shape_without_url_mode(
    servers: Servers, browsers: Callable[[], Browser], mode: str, shape: str
) -> None:
    """The first call tells the model what to do and carries the link's facts; a repeated call
    shows the same link as "still waiting"; after the browser leg the tool answers."""
    user, browser = unique("fallback"), browsers()
    async with httpx.AsyncClient() as http:
        raw = await client(servers, http, mode, user, capabilities=NO_URL_MODE[shape])
        async with attack(
            servers, browsers=[browser], new_connections=1, token_requests=1, exchanges_ok=1
        ) as a:
            first = await raw.call_tool("whoami")
            a.observe(first)
            text, url, structured = link_of(first)
            a.check(url == servers.demo.settings.connect_url(link_id(url)), f"our connect link: {url}")
            a.check(
                structured
                == {
                    "connect_url": url,
                    "provider": "mockhub",
                    "elicitation_id": structured["elicitation_id"],
                    "expires_at": structured["expires_at"],
                },
                f"structuredContent: {structured}",
            )
            a.check(structured["elicitation_id"] == link_id(url), "the id is the link's")
            expires = datetime.fromisoformat(structured["expires_at"]).timestamp()
            ttl = servers.demo.settings.elicitation_ttl
            a.check(abs(expires - (time.time() + ttl)) < 60, f"expires_at: {structured['expires_at']}")
            for step in (
                "Show the user this link",
                url,
                "Wait until the user says they are done",
                "Call this same tool again",
                "MockHub",
                "the MockHub account they sign in to at MockHub",
                structured["expires_at"],
            ):
                a.check(step in text, f"the text says {step!r}: {text}")

            again = await raw.call_tool("whoami")
            a.observe(again)
            waiting, same_url, same = link_of(again)
            a.check(same_url == url and same == structured, f"the same link again: {same}")
            a.check(
                waiting.startswith(f"Still waiting for you to connect MockHub at {url} "),
                f"waiting: {waiting}",
            )
            a.check(len(waiting) < len(text), "the repeat is short")

            await connect_fully(browser, servers, url, user)
            done = await raw.call_tool("whoami")
            a.observe(done)
            result = done["result"]
            a.check(
                not result.get("isError") and result["structuredContent"]["login"] == "octocat", str(done)
            )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", sorted(URL_MODE))
async def test_url_mode_shapes_get_the_url_elicitation(servers: Servers, mode: str, shape: str) -> None:
    """A client that declared `url` gets -32042 (2025-11-25) or an InputRequiredResult
    (2026-07-28), never the tool error."""
    async with httpx.AsyncClient() as http:
        raw = await client(servers, http, mode, unique("urlmode"), capabilities=URL_MODE[shape])
        answer = await raw.call_tool("whoami")
    if mode == "legacy":
        assert answer["error"]["code"] == -32042, answer
    else:
        [request] = answer["result"]["inputRequests"].values()
        assert request["params"]["mode"] == "url", answer


@pytest.mark.parametrize("mode", MODES)
async def test_link_shown_again_only_to_its_user_and_client(
    servers: Servers, browsers: Callable[[], Browser], mode: str
) -> None:
    """Alice's unopened link is shown again to Alice's client only: Bob, and Alice through another
    client, get links of their own; everyone's flow still completes afterwards."""
    alice, bob = unique("alice"), unique("bob")
    alice_browser, bob_browser = browsers(), browsers()
    form_only = NO_URL_MODE["form"]
    async with httpx.AsyncClient() as http:
        alices = await client(servers, http, mode, alice, capabilities=form_only, client_id="client-a")
        alices_other = await client(servers, http, mode, alice, capabilities=form_only, client_id="client-b")
        bobs = await client(servers, http, mode, bob, capabilities=form_only, client_id="client-a")
        async with attack(
            servers,
            browsers=[alice_browser, bob_browser],
            new_connections=2,
            token_requests=2,
            exchanges_ok=2,
        ) as a:
            first = await alices.call_tool("whoami")
            a.observe(first)
            _, alices_url, _ = link_of(first)
            for other in (bobs, alices_other):
                answer = await other.call_tool("whoami")
                a.observe(answer)
                _, url, _ = link_of(answer)
                a.check(url != alices_url, f"another caller gets a link of its own: {url}")
            again = await alices.call_tool("whoami")
            a.observe(again)
            a.check(link_of(again)[1] == alices_url, "Alice's client is shown her link again")

            # Bob's link is refused to Bob's browser if it is Alice's; his own completes.
            _, bobs_url, _ = link_of(await bobs.call_tool("whoami"))
            a.check(bobs_url != alices_url, "Bob never sees Alice's link")
            refused = await open_link(bob_browser, alices_url, bob)
            a.check(refused.status_code == 403, f"Alice's link in Bob's browser: {refused.status_code}")
            await connect_fully(bob_browser, servers, bobs_url, bob)
            await connect_fully(alice_browser, servers, alices_url, alice)
            for caller, login in ((alices, "octocat"), (bobs, "octocat")):
                done = await caller.call_tool("whoami")
                a.observe(done)
                a.check(done["result"]["structuredContent"]["login"] == login, str(done))
            a.check(elicitation_status(servers, link_id(alices_url)) == "complete", "Alice's flow completed")


def link_id(url: str) -> str:
    return url.rsplit("elicitationId=", 1)[-1]


@pytest.mark.parametrize("mode", MODES)
async def test_an_opened_link_is_not_shown_again(
    servers: Servers, browsers: Callable[[], Browser], mode: str
) -> None:
    """A link opened in a browser works once (2026-07-28/security-best-practices.mdx "State
    Handle Hijacking"): a call after that gets a new link, never the spent one."""
    user, browser = unique("opened"), browsers()
    async with httpx.AsyncClient() as http:
        raw = await client(servers, http, mode, user, capabilities=NO_URL_MODE["elicitation {}"])
        async with attack(servers, browsers=[browser]) as a:
            first = await raw.call_tool("whoami")
            a.observe(first)
            _, url, _ = link_of(first)
            page = await open_link(browser, url, user)
            a.status(page, 200)
            await continue_to_provider(browser, servers, page)
            a.check(elicitation_status(servers, link_id(url)) == "opened", "the link was opened")
            again = await raw.call_tool("whoami")
            a.observe(again)
            text, new_url, _ = link_of(again)
            a.check(new_url != url and not text.startswith("Still waiting"), f"a new link: {text}")


@pytest.mark.parametrize("mode", MODES)
async def test_the_link_names_the_account_being_reconnected(servers: Servers, mode: str) -> None:
    """A held connection without the scopes the tool needs: the text names that account."""
    user = unique("reconnect")
    held = await seed_connection(servers, user)
    narrower = replace(held, tokens=replace(held.tokens, scopes=()))
    await servers.apps["mcp"].state.runtime.store.put_connection(narrower)
    async with httpx.AsyncClient() as http:
        raw = await client(servers, http, mode, user, capabilities=NO_URL_MODE["no elicitation"])
        text, url, _ = link_of(await raw.call_tool("whoami"))
    assert f"this will use the MockHub account {held.account_label!r} (reconnecting it)" in text, text
    assert url in text

"""The provider leg against OAuth servers nobody on the project wrote, installed from npm.

- oidc-provider (panva): PKCE required for every client, RFC 7009 revocation, RFC 9207 `iss` in
  the authorization response, its own login and consent pages (devInteractions);
- oauth2-mock-server (axa-group): auto-approves, serves OIDC discovery metadata, sends no `iss`.

Each test starts its server with tests/integration/node (`install.sh` first), our MCP server, the
dev authorization server, the SDK's MCP client and the scripted browser, all on 127.0.0.1.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import URL_ELICITATION_REQUIRED

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import mcp_client
from tests.integration.node_servers import NodeServer
from tests.integration.stack import OIDC_CLIENT_ID, PROVIDER, Stack, discovered, mock_server_spec

pytestmark = pytest.mark.integration

USER = "alice"  # the MCP user (dev authorization server)
IDP_LOGIN = "alice-at-idp"  # the account at oidc-provider (its `sub`)
MOCK_SUB = "johndoe"  # oauth2-mock-server's fixed subject


async def _never(params: Any) -> str:
    raise AssertionError("a legacy -32042 flow must not send elicitation/create")


async def legacy_elicitation(client: Any) -> UrlElicitationRequiredError:
    with pytest.raises(MCPError) as raised:
        await client.call_tool("whoami", {"provider": PROVIDER})
    assert raised.value.error.code == URL_ELICITATION_REQUIRED
    return UrlElicitationRequiredError.from_error(raised.value.error)


def callback_urls(browser: Browser) -> list[str]:
    return [u for u in browser.visited if urlsplit(u).path == f"/callback/{PROVIDER}"]


def query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def assert_no_provider_tokens(server: NodeServer, *texts: Any) -> None:
    """DESIGN invariant 6: nothing the MCP client received holds a token the provider issued."""
    blob = " ".join(t if isinstance(t, str) else json.dumps(t, default=str) for t in texts)
    issued = server.issued_tokens()
    assert issued, "the provider should have issued tokens in this scenario"
    for token in issued:
        assert token not in blob


async def legacy_connect(stack: Stack, browser: Browser, server: NodeServer, login: str) -> dict[str, Any]:
    """The whole 2025-11-25 flow; returns whoami's structured result after the retry."""
    async with mcp_client(stack, USER, "legacy", on_url=_never) as (client, rec):
        error = await legacy_elicitation(client)
        [elicitation] = error.elicitations
        assert elicitation.mode == "url"
        assert elicitation.url.startswith(f"{stack.public_url}/connect?elicitationId=")

        page = await browser.complete_connect(elicitation.url, username=USER, login=login)
        assert page.status_code == 200, page.text
        assert "return to your MCP client" in page.text

        with anyio.fail_after(10):
            await rec.completed.wait()
        assert rec.completed_ids() == [elicitation.elicitation_id]

        result = await client.call_tool("whoami", {"provider": PROVIDER})
        assert not result.is_error, result
        assert result.structured_content is not None
        assert_no_provider_tokens(server, result.model_dump(), error.error.model_dump(), rec.notifications)
        profile: dict[str, Any] = result.structured_content
        return profile


# --- oidc-provider ------------------------------------------------------------------------------


async def test_oidc_discovery_fills_endpoints_and_issuer(
    oidc_stack: Stack, oidc_provider: NodeServer
) -> None:
    provider = oidc_stack.provider
    assert provider is not None
    issuer = oidc_provider.issuer
    # oidc-provider advertises authorization_response_iss_parameter_supported: RFC 9207 applies.
    assert provider.issuer == issuer
    for url in (provider.authorize_url, provider.token_url, provider.userinfo_url, provider.revocation_url):
        assert url.startswith(f"{issuer}/")
    assert provider.revocation_url  # features.revocation is enabled


async def test_oidc_legacy_full_flow(oidc_stack: Stack, oidc_provider: NodeServer, browser: Browser) -> None:
    profile = await legacy_connect(oidc_stack, browser, oidc_provider, IDP_LOGIN)
    # Only what oidc-provider's userinfo endpoint returns (claims: openid -> sub).
    assert profile == {"sub": IDP_LOGIN}

    # The browser went through oidc-provider's own login and consent pages...
    interactions = [u for u in browser.visited if u.startswith(f"{oidc_provider.issuer}/interaction/")]
    assert interactions, browser.visited
    # ...and came back once, with the RFC 9207 `iss` our configuration expects.
    [callback] = callback_urls(browser)
    params = query(callback)
    assert params["iss"] == [oidc_provider.issuer]
    assert "code" in params and "state" in params

    # We sent PKCE S256, and exactly one code was redeemed.
    authorizes = [e for e in oidc_provider.events_of("authorize") if e["has_code_challenge"]]
    assert authorizes and all(e["code_challenge_method"] == "S256" for e in authorizes)
    assert len(oidc_provider.events_of("token")) == 1


async def test_oidc_stateless_full_flow(
    oidc_stack: Stack, oidc_provider: NodeServer, browser: Browser
) -> None:
    async def open_in_browser(params: Any) -> str:
        assert params.mode == "url"
        assert params.elicitation_id is None  # removed on 2026-07-28
        page = await browser.complete_connect(params.url, username=USER, login=IDP_LOGIN)
        assert page.status_code == 200, page.text
        return "accept"

    async with mcp_client(oidc_stack, USER, "2026-07-28", on_url=open_in_browser) as (client, rec):
        result = await client.call_tool("whoami", {"provider": PROVIDER})  # -32042 would raise
        assert not result.is_error, result
        assert result.structured_content == {"sub": IDP_LOGIN}
        assert len(rec.elicitations) == 1
        [callback] = callback_urls(browser)
        assert query(callback)["iss"] == [oidc_provider.issuer]
        assert_no_provider_tokens(
            oidc_provider, result.model_dump(), [e.model_dump() for e in rec.elicitations], rec.notifications
        )


async def test_oidc_provider_requires_pkce(stack: Stack, oidc_provider: NodeServer) -> None:
    """`pkce.required` is enforced by oidc-provider itself, for our confidential client too."""
    async with httpx.AsyncClient(follow_redirects=False, timeout=10) as http:
        metadata = (await http.get(f"{oidc_provider.issuer}/.well-known/openid-configuration")).json()
        request = {
            "client_id": OIDC_CLIENT_ID,
            "redirect_uri": stack.redirect_uri,
            "response_type": "code",
            "scope": "openid",
            "state": "s" * 32,
        }
        refused = await http.get(metadata["authorization_endpoint"], params=request)
        assert refused.is_redirect
        location = refused.headers["location"]
        assert location.startswith(f"{stack.redirect_uri}?")
        params = query(location)
        assert params["error"] == ["invalid_request"]
        assert "PKCE" in params["error_description"][0]
        assert params["iss"] == [oidc_provider.issuer]

        # Control: the same request with an S256 challenge goes on to the login interaction.
        challenge = {"code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"}
        accepted = await http.get(
            metadata["authorization_endpoint"],
            params={**request, **challenge, "code_challenge_method": "S256"},
        )
        assert accepted.is_redirect
        assert urlsplit(accepted.headers["location"]).path.startswith("/interaction/")
    assert oidc_provider.events_of("token") == []


async def test_oidc_replayed_callback_never_reaches_the_token_endpoint_again(
    oidc_stack: Stack, oidc_provider: NodeServer, browser: Browser
) -> None:
    """A reload of the callback shows the first outcome; the same state with another code is
    refused. Neither exchanges a code again (RFC 6749 §10.5)."""
    await legacy_connect(oidc_stack, browser, oidc_provider, IDP_LOGIN)
    [callback] = callback_urls(browser)
    reload = await browser.get(callback)
    assert reload.status_code == 200  # the first outcome, read back from the store
    parts = urlsplit(callback)
    params = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    other_code = parts._replace(query=urlencode({**params, "code": "another-code"})).geturl()
    replay = await browser.get(other_code)
    assert replay.status_code == 400  # the state was consumed by the first callback
    assert len(oidc_provider.events_of("token")) == 1  # neither reached the token endpoint


async def test_oidc_disconnect_revokes_the_token(
    oidc_stack: Stack, oidc_provider: NodeServer, browser: Browser, client_secret: str
) -> None:
    await legacy_connect(oidc_stack, browser, oidc_provider, IDP_LOGIN)
    [issued] = oidc_provider.events_of("token")
    access_token = issued["access_token"]
    provider = oidc_stack.provider
    assert provider is not None
    async with httpx.AsyncClient(timeout=10) as http:

        async def userinfo_status() -> int:
            response = await http.get(
                provider.userinfo_url, headers={"Authorization": f"Bearer {access_token}"}
            )
            return response.status_code

        async def introspect() -> dict[str, Any]:
            response = await http.post(
                f"{oidc_provider.issuer}/token/introspection",
                data={"token": access_token, "client_id": OIDC_CLIENT_ID, "client_secret": client_secret},
            )
            response.raise_for_status()
            body: dict[str, Any] = response.json()
            return body

        assert await userinfo_status() == 200
        assert (await introspect())["active"] is True

        async with mcp_client(oidc_stack, USER, "legacy", on_url=_never) as (client, _):
            result = await client.call_tool("disconnect", {"provider": PROVIDER})
            assert not result.is_error, result
            outcome = result.structured_content
            assert outcome is not None
            assert outcome["disconnected"] == [IDP_LOGIN]
            listed = await client.call_tool("list_connections", {})
            assert f'"provider": "{PROVIDER}"' not in json.dumps(listed.structured_content)
            assert_no_provider_tokens(oidc_provider, result.model_dump(), listed.model_dump())

        if "revoked" not in outcome:
            pytest.skip(
                "disconnect's result has no `revoked` list yet (RFC 7009 revocation is not in this "
                "build): the connection was deleted; revocation at oidc-provider was not checked"
            )
        assert outcome["revoked"] == [IDP_LOGIN]
        assert oidc_provider.events_of("revocation"), "no request reached oidc-provider's revocation endpoint"
        assert (await introspect())["active"] is False
        assert await userinfo_status() == 401


# --- oauth2-mock-server -------------------------------------------------------------------------


async def test_oauth2_mock_server_discovery(mock_stack: Stack, oauth2_mock_server: NodeServer) -> None:
    provider = mock_stack.provider
    assert provider is not None
    issuer = oauth2_mock_server.issuer
    async with httpx.AsyncClient(timeout=10) as http:
        metadata = (await http.get(f"{issuer}/.well-known/openid-configuration")).json()
    assert metadata["issuer"] == issuer
    assert "S256" in metadata["code_challenge_methods_supported"]
    assert (provider.authorize_url, provider.token_url, provider.userinfo_url) == (
        metadata["authorization_endpoint"],
        metadata["token_endpoint"],
        metadata["userinfo_endpoint"],
    )
    # RFC 9207 is required only when advertised; this server does not advertise it (nor send `iss`).
    if metadata.get("authorization_response_iss_parameter_supported") is True:
        assert provider.issuer == issuer
    else:
        assert provider.issuer is None


async def test_oauth2_mock_server_legacy_full_flow(
    mock_stack: Stack, oauth2_mock_server: NodeServer, browser: Browser
) -> None:
    profile = await legacy_connect(mock_stack, browser, oauth2_mock_server, login="unused")
    assert profile == {"sub": MOCK_SUB}  # its userinfo endpoint's whole answer

    # It auto-approves: from its authorize endpoint straight back to our callback, without `iss`.
    issuer = oauth2_mock_server.issuer
    assert any(u.startswith(f"{issuer}/authorize?") for u in browser.visited), browser.visited
    [callback] = callback_urls(browser)
    params = query(callback)
    assert "iss" not in params
    assert "code" in params and "state" in params

    [authorize] = oauth2_mock_server.events_of("authorize")
    assert authorize["code_challenge_method"] == "S256" and authorize["has_code_challenge"]
    # A token response with a code_verifier means the server checked it against the challenge.
    [token] = oauth2_mock_server.events_of("token")
    assert token["grant_type"] == "authorization_code"
    assert token["has_code_verifier"] is True
    assert token["status"] == 200


async def test_oauth2_mock_server_reported_scope_is_used(
    stack: Stack, oauth2_mock_server: NodeServer, browser: Browser, client_secret: str
) -> None:
    """RFC 6749 §5.1: the token response's `scope` is what was granted. oauth2-mock-server reports
    "dummy" when the token request names no scope (ours never does), so a connection made while
    asking for `openid` does not count as an `openid` grant: the retry asks to connect again."""
    stack.start(await discovered(mock_server_spec(oauth2_mock_server.issuer, ("openid",)), client_secret))
    async with mcp_client(stack, USER, "legacy", on_url=_never) as (client, _):
        first = await legacy_elicitation(client)
        page = await browser.complete_connect(first.elicitations[0].url, username=USER)
        assert page.status_code == 200, page.text
        [authorize] = oauth2_mock_server.events_of("authorize")
        assert authorize["has_code_challenge"]
        [token] = oauth2_mock_server.events_of("token")
        assert token["status"] == 200 and token["scope"] == "dummy"

        listed = await client.call_tool("list_connections", {})
        assert not listed.is_error
        assert "dummy" in json.dumps(listed.structured_content)
        again = await legacy_elicitation(client)
        assert again.elicitations[0].elicitation_id != first.elicitations[0].elicitation_id

"""2026-07-28 `requestState` is attacker-controlled input: integrity-protected, bound to the user,
the tool and its arguments, short-lived, single use (2026-07-28 patterns-mrtr.mdx "Server
Requirements" and "Security Considerations"). These attacks exist only on 2026-07-28."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import httpx
import mcp_types
import pytest
from mcp import Client
from mcp.server.request_state import AESGCMRequestStateCodec
from mcp.shared.exceptions import MCPError

from mock_providers.testing.client import Recorder, mcp_client
from mock_providers.testing.servers import HOST, ThreadedServers, free_port
from service.app import create_app
from tests.security.attack import RecordingApp, Servers, attack, unique
from tests.security.flows import ACCEPT, MODERN, ask, bearer, manual
from tests.security.rpc import RawMcp

INVALID = "Invalid or expired requestState"
ELICITATION_TTL = 120  # not the SDK's 600 s default, so a state sealed with that default shows
pytestmark = [
    pytest.mark.security,
    pytest.mark.demo_settings(retry_wait_seconds=0.2, elicitation_ttl=ELICITATION_TTL),
]


@dataclass
class Asked:
    client: Client
    recorder: Recorder
    state: str


@asynccontextmanager
async def asked(servers: Servers, user: str, **kwargs: Any) -> AsyncIterator[Asked]:
    """`user` called whoami on 2026-07-28 and holds the InputRequiredResult's requestState."""
    async with mcp_client(servers, user, MODERN, on_url=manual, **kwargs) as (client, recorder):
        first = await ask(client, MODERN)
        assert first.request_state
        yield Asked(client, recorder, first.request_state)


async def present(
    client: Client, state: Any, tool: str = "whoami", arguments: dict[str, Any] | None = None
) -> Any:
    return await client.session.call_tool(
        tool, arguments or {}, allow_input_required=True, input_responses=ACCEPT, request_state=state
    )


async def refused(a: Any, call: Any, message: str = INVALID) -> None:
    with pytest.raises(MCPError) as raised:
        await call
    a.rpc_error(raised.value, mcp_types.INVALID_PARAMS, message)


def tampered_states(state: str) -> dict[str, str]:
    body = state.removeprefix("v1.")
    middle = len(body) // 2
    flipped = "A" if body[middle] != "A" else "B"
    return {
        "one character flipped": f"v1.{body[:middle]}{flipped}{body[middle + 1 :]}",
        "truncated": state[:-4],
        "extended": state + "AAAA",
        "prefix removed": body,
        "another version prefix": "v2." + body,
        "random bytes of the same length": "v1."
        + base64.urlsafe_b64encode(secrets.token_bytes(len(body) * 3 // 4)).decode().rstrip("="),
        "prefix only": "v1.",
        "hand-made plaintext": json.dumps({"v": 1, "e": "x" * 43, "n": "y" * 43, "p": "mockhub"}),
    }


async def test_tampered_request_state_is_rejected_and_burns_nothing(servers: Servers) -> None:
    """Tampered requestState (flipped, cut, random, hand-made...): -32602; the real one still works (mrtr)."""
    async with asked(servers, unique("alice")) as s:
        async with attack(servers, recorders=[s.recorder]) as a:
            for forged in tampered_states(s.state).values():
                await refused(a, present(s.client, forged))
            async with (
                httpx.AsyncClient() as http
            ):  # a non-string requestState, which the SDK client cannot send
                raw = RawMcp(servers, http, MODERN, bearer(servers, unique("mallory")))
                answer = await raw.call_tool("whoami", {}, requestState=12345)
                a.check(
                    answer.get("error", {}).get("code") == mcp_types.INVALID_PARAMS, f"non-string: {answer}"
                )
        again = await present(s.client, s.state)  # control: the refusals consumed nothing
        assert isinstance(again, mcp_types.InputRequiredResult) and again.request_state


@pytest.fixture(scope="module")
def other_key_server(servers: Servers) -> Iterator[Servers]:
    """A second MCP server on the same store and AS whose request_state_keys differ."""
    port = free_port()
    key = base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()
    first = servers.demo.settings
    settings = first.replace(
        public_url=f"http://{HOST}:{port}",
        port=port,
        auth_audience=first.resource_url,  # a replica behind the same public audience...
        request_state_keys=key,  # ...but with request-state keys of its own
    )
    app = create_app(settings)
    threaded = ThreadedServers([(RecordingApp(app, servers.wire, "mcp"), port)])
    threaded.start()
    other = Servers(servers.data_dir, port=port, providers_port=servers.providers_port)
    other.demo = replace(servers.demo, settings=settings)
    other.apps = {"mcp": app, "providers": servers.apps["providers"]}
    other.wire = servers.wire
    yield other
    threaded.stop()


async def test_request_state_from_another_server_key_is_rejected(
    servers: Servers, other_key_server: Servers
) -> None:
    """requestState sealed by a server with other keys: -32602 (patterns-mrtr Security Considerations)."""
    alice = unique("alice")
    async with asked(other_key_server, alice) as foreign:
        async with (
            mcp_client(servers, alice, MODERN, on_url=manual) as (client, recorder),
            attack(servers, recorders=[recorder, foreign.recorder]) as a,
        ):
            await refused(a, present(client, foreign.state))
        again = await present(foreign.client, foreign.state)  # control: its own server accepts it
        assert isinstance(again, mcp_types.InputRequiredResult)


def resealed(servers: Servers, state: str, **claim_changes: Any) -> str:
    """Open a genuine requestState with the server's own key, change its claims, seal it again: what
    a state minted long ago (or for another service sharing the key) looks like."""
    codec = AESGCMRequestStateCodec(servers.demo.settings.request_state_key_list())
    envelope = json.loads(codec.unseal(state))
    envelope.update(claim_changes)
    return codec.seal(json.dumps(envelope).encode())


async def test_expired_or_foreign_audience_request_state_is_rejected(servers: Servers) -> None:
    """requestState expired, from the future or for another service: -32602 (patterns-mrtr)."""
    now = time.time()
    async with asked(servers, unique("alice")) as s, attack(servers, recorders=[s.recorder]) as a:
        await refused(a, present(s.client, resealed(servers, s.state, iat=now - 700, exp=now - 100)))
        await refused(a, present(s.client, resealed(servers, s.state, aud="another-mcp-server")))
        await refused(a, present(s.client, resealed(servers, s.state, iat=now + 3600, exp=now + 4200)))
        await refused(a, present(s.client, resealed(servers, s.state, v=2)))


async def test_request_state_lives_as_long_as_the_flow_it_resumes(servers: Servers) -> None:
    """requestState sealed for MCPUC_ELICITATION_TTL, like its nonce and its connect link; one
    past that lifetime: -32602 (patterns-mrtr Server Requirements: short-lived state)."""
    codec = AESGCMRequestStateCodec(servers.demo.settings.request_state_key_list())
    async with asked(servers, unique("alice")) as s, attack(servers, recorders=[s.recorder]) as a:
        envelope = json.loads(codec.unseal(s.state))
        lifetime = envelope["exp"] - envelope["iat"]
        a.check(lifetime == ELICITATION_TTL, f"sealed for {lifetime} s, not {ELICITATION_TTL} s")
        born = time.time() - ELICITATION_TTL - 1
        await refused(a, present(s.client, resealed(servers, s.state, iat=born, exp=born + lifetime)))
        again = await present(s.client, s.state)  # control: the state within its lifetime works
        a.check(isinstance(again, mcp_types.InputRequiredResult), f"the state still resumes: {again}")


async def test_replayed_request_state_is_rejected(servers: Servers) -> None:
    """Replayed requestState: -32602 "already used" (patterns-mrtr Server Requirements: single use)."""
    async with asked(servers, unique("alice")) as s:
        first = await present(s.client, s.state)
        assert isinstance(first, mcp_types.InputRequiredResult)
        async with attack(servers, recorders=[s.recorder]) as a:
            await refused(a, present(s.client, s.state), "already used")
            await refused(a, present(s.client, s.state), "already used")


async def test_request_state_replayed_in_parallel_is_used_once(servers: Servers) -> None:
    """requestState replayed by 5 concurrent retries: exactly one proceeds (patterns-mrtr: single use)."""
    async with asked(servers, unique("alice")) as s, attack(servers, recorders=[s.recorder]) as a:
        answers = await asyncio.gather(
            *(present(s.client, s.state) for _ in range(5)), return_exceptions=True
        )
        went_on = [x for x in answers if isinstance(x, mcp_types.InputRequiredResult)]
        a.check(len(went_on) == 1, f"exactly one retry proceeded: {answers}")
        for error in answers:
            if not isinstance(error, mcp_types.InputRequiredResult):
                a.rpc_error(error, mcp_types.INVALID_PARAMS, "already used")


async def test_request_state_presented_by_another_user_or_client_is_rejected(servers: Servers) -> None:
    """Alice's requestState from Bob or another client of Alice's: -32602 (patterns-mrtr: user-bound)."""
    alice = unique("alice")
    async with asked(servers, alice) as s:
        async with httpx.AsyncClient() as http, attack(servers, recorders=[s.recorder]) as a:
            for token in (bearer(servers, unique("bob")), bearer(servers, alice, client_id="another-client")):
                answer = await RawMcp(servers, http, MODERN, token).call_tool(
                    "whoami", {}, requestState=s.state, inputResponses={"connect": {"action": "accept"}}
                )
                error = answer.get("error", {})
                a.check(error.get("code") == mcp_types.INVALID_PARAMS, f"refused: {answer}")
                a.check(error.get("message") == INVALID, "the frozen message, no detail")
        again = await present(s.client, s.state)  # control: Alice's own client still may use it
        assert isinstance(again, mcp_types.InputRequiredResult)


async def test_request_state_presented_for_another_tool_is_rejected(servers: Servers) -> None:
    """whoami's requestState sent to list_connections or disconnect: -32602 (patterns-mrtr)."""
    async with asked(servers, unique("alice")) as s, attack(servers, recorders=[s.recorder]) as a:
        await refused(a, present(s.client, s.state, "list_connections"))
        await refused(a, present(s.client, s.state, "disconnect", {"provider": "mockhub"}))


async def test_request_state_with_other_arguments_is_rejected(servers: Servers) -> None:
    """whoami's requestState with another provider or account argument: -32602 (patterns-mrtr)."""
    async with asked(servers, unique("alice")) as s, attack(servers, recorders=[s.recorder]) as a:
        for arguments in ({"provider": "github"}, {"provider": "mockhub"}, {"account": "someone-else"}):
            await refused(a, present(s.client, s.state, "whoami", arguments))

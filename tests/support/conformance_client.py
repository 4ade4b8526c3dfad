"""Our downstream connector as the MCP conformance suite's "client under test" (`conformance client
--command ...`): run as `python tests/support/conformance_client.py <scenario server URL>` with the
repository on PYTHONPATH.

The suite starts a scenario's OAuth-protected MCP server (and its authorization server, which
approves at once), then runs this with the server's URL, `MCP_CONFORMANCE_SCENARIO`, and for
some scenarios `MCP_CONFORMANCE_CONTEXT` (a pre-registered client). This puts that server behind
our own, as the provider `conf` (`kind = "mcp"`), and does what a user of our server does:

1. our server starts: discovery, registration (`service.runtime.resolve_providers`);
2. an MCP client of ours (the revision the suite asks for) lists tools and calls `conf_test-tool`;
3. each connect link our server answers with is walked by the scripted browser (sign-in at our
   development authorization server, our confirmation page, the scenario's authorization server,
   back to our callback), and the call retried; a step-up asks again, a few times at most;
4. the downstream's answer, `test`, ends it with status 0.

Exit status 1, with the reason on stderr, when our server refuses the downstream (the scenarios
that test a client's refusals expect that) or the call does not end with the answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import mcp_types
from mcp.shared.exceptions import (
    MCPError,
    UrlElicitationRequiredError,
)

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import ACCEPT, ConnectLink, accept, mcp_client
from mock_providers.testing.downstream import resolved_providers
from mock_providers.testing.servers import DemoServers
from service.providers.catalogue import ProviderError

PROVIDER = "conf"
TOOL = f"{PROVIDER}_test-tool"
USER = "conformance-user"
# The URL the suite's CIMD scenario expects as client_id: where an operator would publish our
# Client ID Metadata Document for this provider (`client_metadata_url`).
CIMD_URL = "https://conformance-test.local/client-metadata.json"
MAX_ROUNDS = 4  # connect links walked for one call: the first, then step-ups
# Scenarios that change the server after its first authorized call, and the calls that see it:
# SEP-2352's moves the resource to another authorization server, which the second call follows.
CALLS = {"auth/authorization-server-migration": 2}


def provider_table(url: str, scenario: str, context: dict[str, Any]) -> dict[str, Any]:
    table: dict[str, Any] = {
        "kind": "mcp",
        "url": url,
        "display_name": "Conformance",
        "allow_private_network": True,
    }
    if scenario == "auth/basic-cimd":
        table["client_metadata_url"] = CIMD_URL
    if "client_id" in context:  # auth/pre-registration
        table["client_id"] = context["client_id"]
        if context.get("client_secret"):
            table["client_secret"] = context["client_secret"]
            table["token_auth_method"] = context.get("token_endpoint_auth_method", "client_secret_basic")
        else:
            table["token_auth_method"] = "none"
    return table


async def run(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    mode = (
        "legacy"
        if os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25") < "2026"
        else "2026-07-28"
    )
    with tempfile.TemporaryDirectory() as data:
        stack = DemoServers(Path(data))
        try:
            resolved = await resolved_providers(
                stack.demo.settings, {PROVIDER: provider_table(url, scenario, context)}
            )
        except ProviderError as exc:
            print(f"our server refuses the downstream: {exc}", file=sys.stderr)
            return 1
        stack.providers = resolved
        stack.start()
        try:
            return await call_through(stack, mode, CALLS.get(scenario, 1))
        finally:
            stack.stop()


async def call_through(stack: DemoServers, mode: str, calls: int) -> int:
    async with Browser() as browser, mcp_client(stack, USER, mode, on_url=accept) as (client, _):
        listed = [tool.name for tool in (await client.list_tools()).tools]
        print(f"listed: {listed}", file=sys.stderr)
        status = 1
        for _ in range(calls):
            status = await call_once(client, browser)
            if status != 0:
                return status
        return status


async def call_once(client: Any, browser: Browser) -> int:
    """The tool called, each connect link walked and the call retried; 0 for the expected answer."""
    answer = await ask(client, None)
    for _ in range(MAX_ROUNDS):
        if isinstance(answer, mcp_types.CallToolResult):
            return report(answer)
        page = await browser.complete_connect(answer.url, username=USER)
        if page.status_code != 200:
            print(f"the browser leg ended with {page.status_code}", file=sys.stderr)
            return 1
        answer = await ask(client, answer)
    print("the call never got through", file=sys.stderr)
    return 1


async def ask(client: Any, after: ConnectLink | None) -> ConnectLink | mcp_types.CallToolResult:
    """Call the tool (after a walked link: its retry); the result, or the next link to walk."""
    retrying = (
        {"input_responses": ACCEPT, "request_state": after.request_state}
        if after and after.request_state
        else {}
    )
    try:
        answer = await client.session.call_tool(TOOL, {}, allow_input_required=True, **retrying)
    except MCPError as raised:
        if raised.error.code != mcp_types.URL_ELICITATION_REQUIRED:
            raise
        [elicitation] = UrlElicitationRequiredError.from_error(raised.error).elicitations
        return ConnectLink(str(elicitation.url), str(elicitation.elicitation_id))
    if isinstance(answer, mcp_types.InputRequiredResult):
        requests = list((answer.input_requests or {}).values())
        url = str(requests[0].params.url) if requests else (after.url if after else "")
        return ConnectLink(url, "", answer.request_state)
    assert isinstance(answer, mcp_types.CallToolResult)
    return answer


def text_of(result: mcp_types.CallToolResult) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))


def report(result: mcp_types.CallToolResult) -> int:
    print(f"result: is_error={result.is_error} {text_of(result)!r}", file=sys.stderr)
    return 0 if not result.is_error and text_of(result) == "test" else 1


def main() -> int:
    return asyncio.run(run(sys.argv[-1]))


if __name__ == "__main__":
    sys.exit(main())

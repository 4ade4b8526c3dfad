"""Example MCP client: call `whoami`, connect MockHub through the printed URL, print the account.

    python examples/client.py --mode legacy       # 2025-11-25: -32042, then the completion notification
    python examples/client.py --mode 2026-07-28   # stateless: InputRequiredResult + requestState

Run `mcp-url-connect demo` first. The bearer token comes from the demo's dev authorization
server keys (`mcp-url-connect dev-token`), or pass one with --token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import webbrowser
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError

COMPLETION_TIMEOUT = 300.0


def show_url(url: str, open_browser: bool) -> None:
    # The spec asks clients to show the full URL and get consent before opening it.
    print(f"\nConnect your account by opening this URL in your browser:\n\n    {url}\n", flush=True)
    if open_browser:
        webbrowser.open(url)


async def run_legacy(client: Client, completed: asyncio.Event, open_browser: bool) -> Any:
    try:
        return await client.call_tool("whoami", {})
    except MCPError as exc:
        if exc.error.code != mcp_types.URL_ELICITATION_REQUIRED:
            raise
        for elicitation in UrlElicitationRequiredError.from_error(exc.error).elicitations:
            print(elicitation.message)
            show_url(elicitation.url, open_browser)
    print("Waiting for notifications/elicitation/complete ...", flush=True)
    await asyncio.wait_for(completed.wait(), COMPLETION_TIMEOUT)
    print("Completed; retrying whoami.")
    return await client.call_tool("whoami", {})


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--server", default="http://127.0.0.1:8000/mcp")
    parser.add_argument("--mode", default="legacy", choices=["legacy", "2026-07-28"])
    parser.add_argument("--user", default="alice", help="subject for the dev token")
    parser.add_argument("--data-dir", type=Path, default=Path(".mcp-url-connect"))
    parser.add_argument("--token", help="bearer token (default: minted from the demo's dev AS keys)")
    parser.add_argument("--open", action="store_true", help="open the connect URL in the default browser")
    args = parser.parse_args()

    token = args.token
    if token is None:
        from mock_providers import mint_access_token

        token = mint_access_token(args.data_dir, args.user)

    completed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ElicitCompleteNotification):
            print(f"Received completion for elicitation {message.params.elicitation_id[:8]}...")
            completed.set()

    async def on_elicit(ctx: Any, params: Any) -> mcp_types.ElicitResult:
        # 2026-07-28: the SDK's retry loop calls this, then retries with the requestState.
        print(params.message)
        show_url(params.url, args.open)
        await asyncio.to_thread(input, "Press Enter once the browser says you are connected... ")
        return mcp_types.ElicitResult(action="accept")

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with Client(
        streamable_http_client(args.server, http_client=http),
        mode=args.mode,
        message_handler=on_message,
        elicitation_callback=on_elicit,
    ) as client:
        if args.mode == "legacy":
            result = await run_legacy(client, completed, args.open)
        else:
            result = await client.call_tool("whoami", {})
    if result.is_error:
        print("Tool error:", result.content[0].text if result.content else result, file=sys.stderr)
        return 1
    print("\nYour MockHub account:")
    print(json.dumps(result.structured_content, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""Example MCP client: call `whoami`, connect MockHub through the printed URL, print the account.

    .venv/bin/python examples/client.py --mode legacy      # 2025-11-25: -32042, then the completion
    .venv/bin/python examples/client.py --mode 2026-07-28  # stateless: InputRequiredResult + requestState
    .venv/bin/python examples/client.py --disconnect       # disconnect MockHub first: a fresh flow

Run `make demo` (or `.venv/bin/mcp-url-connect demo`) first. The bearer token comes from the
demo's dev authorization server keys (`mcp-url-connect dev-token`), or pass one with --token.
After you approve in the browser the client continues by itself in both modes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import webbrowser
from pathlib import Path
from typing import Any

try:
    import httpx2
    import mcp_types
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
except ImportError as missing:
    sys.exit(
        f"examples/client.py: {missing}. Run it with the project's virtualenv "
        "(`make demo` creates it): .venv/bin/python examples/client.py"
    )

COMPLETION_TIMEOUT = 300.0
RETRY_INTERVAL = 1.0  # 2026-07-28: pause between retries with the requestState (patterns-mrtr)


def show_url(url: str, open_browser: bool) -> None:
    # The spec asks clients to show the full URL and get consent before opening it.
    print(f"\nConnect your account by opening this URL in your browser:\n\n    {url}\n", flush=True)
    if open_browser:
        webbrowser.open(url)


class Outcome(Exception):
    """The flow ended without the tool's result; the message is the one line to print."""


async def run_legacy(
    client: Client, arguments: dict[str, Any], completed: asyncio.Event, args: argparse.Namespace
) -> Any:
    """2025-11-25: the -32042 error carries the URL; the server notifies when the flow is done."""
    try:
        return await client.call_tool("whoami", arguments)
    except MCPError as exc:
        if exc.error.code != mcp_types.URL_ELICITATION_REQUIRED:
            raise
        for elicitation in UrlElicitationRequiredError.from_error(exc.error).elicitations:
            print(elicitation.message)
            show_url(elicitation.url, args.open)
    print("Waiting for the browser step (notifications/elicitation/complete) ...", flush=True)
    try:
        await asyncio.wait_for(completed.wait(), args.timeout)
    except TimeoutError:
        raise Outcome(
            f"No completion within {args.timeout:.0f} s: the connection was not made "
            "(denied, abandoned or failed). Run the client again to retry."
        ) from None
    print("Completed; retrying whoami.", flush=True)
    try:
        return await client.call_tool("whoami", arguments)
    except MCPError as exc:
        if exc.error.code != mcp_types.URL_ELICITATION_REQUIRED:
            raise
        raise Outcome(
            "The connection was not made (denied or failed). Run the client again to retry."
        ) from None


async def run_stateless(client: Client, arguments: dict[str, Any], args: argparse.Namespace) -> Any:
    """2026-07-28: answer the URL request with `accept`, then retry with the requestState until the
    tool answers. The server holds each retry a few seconds while the flow is in progress and
    answers with state only (no new prompt) when it is still not done."""
    deadline = time.monotonic() + args.timeout
    result = await client.session.call_tool("whoami", arguments, allow_input_required=True)
    waiting_shown = False
    while isinstance(result, mcp_types.InputRequiredResult):
        responses: dict[str, Any] | None = None
        if result.input_requests:
            responses = {}
            for key, request in result.input_requests.items():
                params = request.params
                if getattr(params, "mode", None) != "url":
                    raise Outcome(f"The server asked for input this example does not handle ({key}).")
                print(params.message)
                show_url(params.url, args.open)
                responses[key] = mcp_types.ElicitResult(action="accept")
        else:
            if not waiting_shown:
                print("Waiting for the browser step (retrying with the requestState) ...", flush=True)
                waiting_shown = True
            await asyncio.sleep(RETRY_INTERVAL)
        if time.monotonic() > deadline:
            raise Outcome(
                f"No connection within {args.timeout:.0f} s: the flow was not completed. "
                "Run the client again to retry."
            )
        result = await client.session.call_tool(
            "whoami",
            arguments,
            allow_input_required=True,
            input_responses=responses,
            request_state=result.request_state,
        )
    return result


async def disconnect(client: Client, provider: str) -> None:
    result = await client.call_tool("disconnect", {"provider": provider})
    gone = (result.structured_content or {}).get("disconnected") or []
    print(f"Disconnected {provider}: {', '.join(gone) if gone else 'no connection there'}.", flush=True)


async def run(args: argparse.Namespace, token: str) -> int:
    completed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ElicitCompleteNotification):
            print(f"Received completion for elicitation {message.params.elicitation_id[:8]}...")
            completed.set()

    async def on_elicit(ctx: Any, params: Any) -> mcp_types.ElicitResult:
        # Declares URL-mode elicitation support. This server asks through -32042 (2025-11-25) or
        # InputRequiredResult (2026-07-28, driven by run_stateless), so this is only a fallback.
        print(params.message)
        show_url(params.url, args.open)
        return mcp_types.ElicitResult(action="accept")

    arguments = {"provider": args.provider}
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with Client(
        streamable_http_client(args.server, http_client=http),
        mode=args.mode,
        message_handler=on_message,
        elicitation_callback=on_elicit,
    ) as client:
        try:
            if args.disconnect:
                await disconnect(client, args.provider)
            if args.mode == "legacy":
                result = await run_legacy(client, arguments, completed, args)
            else:
                result = await run_stateless(client, arguments, args)
        except Outcome as outcome:
            print(outcome, file=sys.stderr)
            return 1
    if result.is_error:
        print("Tool error:", result.content[0].text if result.content else result, file=sys.stderr)
        return 1
    print(f"\nYour {args.provider} account:")
    print(json.dumps(result.structured_content, indent=2))
    return 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--server", default="http://127.0.0.1:8000/mcp")
    parser.add_argument("--mode", default="legacy", choices=["legacy", "2026-07-28"])
    parser.add_argument("--user", default="alice", help="subject for the dev token")
    parser.add_argument("--provider", default="mockhub", help="the provider whoami asks about")
    parser.add_argument("--data-dir", type=Path, default=Path(".mcp-url-connect"))
    parser.add_argument("--token", help="bearer token (default: minted from the demo's dev AS keys)")
    parser.add_argument("--open", action="store_true", help="open the connect URL in the default browser")
    parser.add_argument(
        "--disconnect", action="store_true", help="call the disconnect tool first, so the flow starts afresh"
    )
    parser.add_argument(
        "--timeout", type=float, default=COMPLETION_TIMEOUT, help="seconds to wait for the browser step"
    )
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    token = args.token
    if token is None:
        from mcp_url_connect.testing import NoDevKeys, mint_access_token

        try:
            token = mint_access_token(args.data_dir, args.user)
        except NoDevKeys:
            print(
                f"No dev AS keys in {args.data_dir}: start `make demo` first, or pass --token.",
                file=sys.stderr,
            )
            return 1
    try:
        return asyncio.run(run(args, token))
    except* httpx2.TransportError as failed:
        print(
            f"Cannot reach {args.server} ({failed.exceptions[0]!r}): is `make demo` running?", file=sys.stderr
        )
    except* MCPError as failed:
        print(f"The server refused: {failed.exceptions[0]}", file=sys.stderr)
    except* KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

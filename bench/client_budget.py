"""How long the TypeScript SDK v2 client keeps a 2026-07-28 call alive for a user who never
finishes in the browser, for each `retry_wait_seconds`.

    bash tests/integration/node/install.sh     # once
    .venv/bin/python -m bench.client_budget [--waits 5 25]

The client (tests/integration/node/ts_v2_client.mjs, its input_required handling at the defaults:
10 rounds, 250 ms before a requestState-only leg) accepts the URL elicitation at once; nobody opens
the link. Printed per wait: the retries sent and the time from the accepting leg to the client
giving up (docs/clients.md, "Budgets"). Runs the kit's stack on loopback; asserts nothing.
Takes about 10 * (wait + 0.25) s per wait, the waits in parallel.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.text import TextReceiveStream

from mock_providers.testing import Mcpuc

NODE_DIR = Path(__file__).resolve().parents[1] / "tests" / "integration" / "node"
GIVE_UP_WITHIN = 900.0  # seconds; 10 legs of the longest wait a proxy allows, with room


def node_binary() -> str:
    """install.sh's Node.js (node_modules/.bin/node), else `node` from PATH."""
    local = NODE_DIR / "node_modules" / ".bin" / "node"
    if os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("node")
    if found is None or not (NODE_DIR / "node_modules" / "@modelcontextprotocol" / "client").is_dir():
        raise SystemExit("needs Node.js and the npm clients: bash tests/integration/node/install.sh")
    return found


async def client_events(command: list[str], env: dict[str, str]) -> list[dict[str, Any]]:
    """The JSON events the client script prints, one a line, until it reports an error."""
    events: list[dict[str, Any]] = []
    async with await anyio.open_process(command, cwd=NODE_DIR, env={**os.environ, **env}) as process:
        assert process.stdout is not None
        buffered = ""
        with anyio.fail_after(GIVE_UP_WITHIN):
            async for chunk in TextReceiveStream(process.stdout):
                buffered += chunk
                *lines, buffered = buffered.split("\n")
                for line in lines:
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue  # a library's stray console output
                    if isinstance(event, dict):
                        events.append(event)
                        if event.get("event") == "error":
                            process.terminate()
                            return events
    return events


async def budget(wait: float, rows: list[str]) -> None:
    scratch = Path(tempfile.mkdtemp())
    stack = Mcpuc(scratch / "data", retry_wait_seconds=wait).start()
    try:
        command = [node_binary(), str(NODE_DIR / "ts_v2_client.mjs"), stack.mcp_url, "whoami"]
        events = await client_events(command, {"MCPUC_BEARER": stack.token("budget-user")})
        legs = [e for e in events if e["event"] == "leg"]
        answered = [e for e in events if e["event"] == "answered"]
        error = events[-1]
        seconds = (answered[-1]["ms"] - legs[1]["ms"]) / 1000
        rows.append(
            f"{wait:>8.1f} s  {len(legs) - 1:>7}  {seconds:>8.1f} s  {str(error.get('message'))[:70]}"
        )
    finally:
        stack.stop()


async def main(waits: list[float]) -> None:
    rows: list[str] = []
    async with anyio.create_task_group() as tasks:
        for wait in waits:
            tasks.start_soon(budget, wait, rows)
    print(f"{'hold':>10}  {'retries':>7}  {'budget':>10}  client's error")
    for row in sorted(rows, key=lambda r: float(r.split()[0])):
        print(row)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waits", type=float, nargs="+", default=[5.0, 25.0])
    anyio.run(main, parser.parse_args().waits)

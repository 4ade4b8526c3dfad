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
import tempfile
from pathlib import Path

import anyio

from mock_providers.testing import Mcpuc
from tests.integration.node_clients import NodeClient
from tests.integration.node_servers import need_node

GIVE_UP_WITHIN = 900.0  # seconds; 10 legs of the longest wait a proxy allows, with room


async def budget(wait: float, rows: list[str]) -> None:
    scratch = Path(tempfile.mkdtemp())
    stack = Mcpuc(scratch / "data", retry_wait_seconds=wait).start()
    try:
        node = need_node("@modelcontextprotocol/client", (20, 0))
        env = {"MCPUC_BEARER": stack.token("budget-user")}
        log = scratch / "ts-v2-client.log"
        async with NodeClient(node, "ts_v2_client.mjs", [stack.mcp_url, "whoami"], env, log) as run:
            await run.expect("elicitation")
            error = await run.expect("error", within=GIVE_UP_WITHIN)
        legs = [e for e in run.events if e["event"] == "leg"]
        answered = [e for e in run.events if e["event"] == "answered"]
        seconds = (answered[-1]["ms"] - legs[1]["ms"]) / 1000
        rows.append(f"{wait:>8.1f} s  {len(legs) - 1:>7}  {seconds:>8.1f} s  {error['message'][:70]}")
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

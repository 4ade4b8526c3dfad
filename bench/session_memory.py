"""What 2025-11-25 sessions cost a `serve` process in memory, measured from /proc: sessions opened
up to the caps, each with its SSE replay buffer filled to its byte budget, the worst a client can
make a session hold (service/mcp/sdk/sse_resumption.py: MAX_BYTES).

    .venv/bin/python -m bench.session_memory [--per-user N] [--per-replica N] [--users N]

Prints the server's resident memory (VmRSS) before and after, its peak (VmHWM), and the cost per
session; docs/operations.md ("Memory") uses these figures for the default caps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.processes import Stack
from mock_providers.dev_as.tokens import mint_access_token
from service.mcp.sdk.sse_resumption import MAX_BYTES, MAX_EVENTS

VERSION = "2025-11-25"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
# A ping's id is kept twice per request (the stream's name and the response) and once more by its
# priming event's stream name: ids this long fill MAX_BYTES within MAX_EVENTS events.
FILL_ID_LENGTH = MAX_BYTES // (MAX_EVENTS // 2) // 2


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """A memory figure of process `pid` from /proc/<pid>/status, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


@dataclass
class Opened:
    sessions: int  # admitted
    refused: int  # 429


async def open_filled_session(http: httpx.AsyncClient, url: str, token: str, fill: bool) -> bool:
    """initialize (+ initialized), then pings with long ids until the replay budget is full; False
    when the server answered 429."""
    headers = {**HEADERS, "Authorization": f"Bearer {token}"}
    params = {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
    opened = await http.post(url, headers=headers, content=json.dumps(body))
    if opened.status_code == 429:
        return False
    opened.raise_for_status()
    headers |= {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": VERSION}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await http.post(url, headers=headers, content=json.dumps(note))
    for n in range(MAX_EVENTS if fill else 0):
        ping = {"jsonrpc": "2.0", "id": f"{n:04d}" + "p" * FILL_ID_LENGTH, "method": "ping"}
        (await http.post(url, headers=headers, content=json.dumps(ping))).raise_for_status()
    return True


async def open_up_to_the_caps(url: str, tokens: list[str], per_user: int, fill: bool = True) -> Opened:
    """Each user opens one more session than its cap, a few at a time; stops at the replica's cap."""
    opened = Opened(0, 0)
    async with httpx.AsyncClient(timeout=60) as http:
        for token in tokens:
            results = []
            for start in range(0, per_user + 1, 4):
                batch = range(start, min(start + 4, per_user + 1))
                results += await asyncio.gather(*(open_filled_session(http, url, token, fill) for _ in batch))
            opened.sessions += sum(results)
            opened.refused += len(results) - sum(results)
            if not all(results) and sum(results) < per_user:
                break  # the replica is full
    return opened


async def warm_up(url: str, token: str) -> None:
    """One filled session first: the code paths are loaded before the baseline is read."""
    async with httpx.AsyncClient(timeout=60) as http:
        assert await open_filled_session(http, url, token, fill=True)


def measure(root: Path, per_user: int, per_replica: int, users: int, fill: bool = True) -> dict[str, float]:
    """Start `serve` with these caps, open sessions up to them, and return the memory figures."""
    settings = {
        "MCPUC_MAX_SESSIONS_PER_USER": str(per_user),
        "MCPUC_MAX_SESSIONS_PER_REPLICA": str(per_replica),
        # Filling the replay buffers sends each user's pings faster than any client would; the
        # rate limit is not what this measures.
        "MCPUC_REQUESTS_PER_SECOND_PER_USER": "1000000",
        "MCPUC_REQUEST_BURST_PER_USER": "1000000",
    }
    stack = Stack(root, server="serve", log_level="WARNING", settings=settings).start()
    try:
        pid = stack.pids["server"]
        tokens = [mint_access_token(stack.data_dir, f"user{i}") for i in range(users)]
        asyncio.run(warm_up(stack.mcp_url, tokens[0]))
        before = rss_kib(pid)
        opened = asyncio.run(open_up_to_the_caps(stack.mcp_url, tokens[1:], per_user, fill))
        after, peak = rss_kib(pid), rss_kib(pid, "VmHWM")
    finally:
        stack.stop()
    sessions = opened.sessions
    return {
        "sessions": sessions,
        "refused": opened.refused,
        "rss_before_mib": before / 1024,
        "rss_after_mib": after / 1024,
        "peak_mib": peak / 1024,
        "kib_per_session": (after - before) / max(sessions, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--per-user", type=int, default=20)
    parser.add_argument("--per-replica", type=int, default=100)
    parser.add_argument("--users", type=int, default=0, help="default: enough to reach the replica's cap")
    parser.add_argument("--empty", action="store_true", help="do not fill the replay buffers")
    args = parser.parse_args()
    users = args.users or args.per_replica // args.per_user + 3
    with tempfile.TemporaryDirectory() as tmp:
        figures = measure(Path(tmp), args.per_user, args.per_replica, users, fill=not args.empty)
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()

"""examples/embed_sdk.py and examples/embed_fastmcp.py run as docs/embedding.md says (the mock
providers in one process, the example in another, configured by serve.env): served as `serve`
serves ours (`run_server`), so slow request heads and bodies are closed in time and in number
while a user's session is served on both revisions, and the example logs no error."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from mock_providers.testing import MODES, mcp_client
from mock_providers.testing.cluster import CLI, wait_for
from mock_providers.testing.servers import HOST, free_port
from service.http.server import REQUEST_TIMEOUT

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 2.0  # MCPUC_REQUEST_HEAD_TIMEOUT_SECONDS and MCPUC_REQUEST_BODY_TIMEOUT_SECONDS
AWAITING = 100  # MCPUC_MAX_CONNECTIONS_AWAITING_HEAD
SLOW_HEAD = b"GET /connections HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
SLOW_BODY = b"POST /logout HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\ncsrf="


@dataclass(frozen=True)
class Example:
    """What `mcp_client` needs (the MCP endpoint, the dev AS keys' data dir), and the log."""

    mcp_url: str
    data_dir: Path
    port: int
    log: Path


@pytest.fixture(scope="module", params=["embed_sdk", "embed_fastmcp"])
def example(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Example]:
    root = tmp_path_factory.mktemp(request.param)
    port, mcp_port = free_port(), free_port()
    args = ["mock-providers", "--host", HOST, "--port", str(port)]
    args += ["--mcp-public-url", f"http://{HOST}:{mcp_port}", "--data-dir", str(root)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log = root / "example.log"
    running: list[subprocess.Popen[bytes]] = []
    try:
        with (root / "providers.log").open("wb") as out:
            running.append(subprocess.Popen([*CLI, *args], stdout=out, stderr=subprocess.STDOUT, env=env))
        wait_for(f"http://{HOST}:{port}/.well-known/openid-configuration", running[0], root / "providers.log")
        written = dict(line.split("=", 1) for line in (root / "serve.env").read_text().splitlines())
        env |= written | {
            "MCPUC_HOST": HOST,
            "MCPUC_PORT": str(mcp_port),
            "MCPUC_AUTH_JWKS_URL": f"http://{HOST}:{port}/jwks.json",  # FastMCP's verifier needs it
            "MCPUC_REQUEST_HEAD_TIMEOUT_SECONDS": str(TIMEOUT),
            "MCPUC_REQUEST_BODY_TIMEOUT_SECONDS": str(TIMEOUT),
            "MCPUC_MAX_CONNECTIONS_AWAITING_HEAD": str(AWAITING),
        }
        with log.open("wb") as out:
            command = [sys.executable, str(REPO / "examples" / f"{request.param}.py")]
            running.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env))
        wait_for(f"http://{HOST}:{mcp_port}/static/mcpuc.css", running[1], log)
        yield Example(f"http://{HOST}:{mcp_port}/mcp", root, mcp_port, log)
    finally:
        for process in reversed(running):
            process.terminate()
            process.wait(timeout=30)


async def _answer(reader: asyncio.StreamReader) -> bytes:
    """What the server wrote before it closed the connection (nothing if it reset it)."""
    try:
        return await reader.read()
    except ConnectionResetError:
        return b""


@pytest.mark.parametrize("mode", MODES)
async def test_slow_heads_and_bodies_are_closed_while_a_user_is_served(example: Example, mode: str) -> None:
    opened = []
    for start in [SLOW_HEAD] * 150 + [SLOW_BODY] * 50:
        reader, writer = await asyncio.open_connection(HOST, example.port)
        writer.write(start)
        opened.append((reader, writer))
    async with mcp_client(example, f"served-{mode}", mode) as (client, _):
        assert "hub_login" in {tool.name for tool in (await client.list_tools()).tools}
    with anyio.fail_after(TIMEOUT + 30):
        answers = [await _answer(reader) for reader, _ in opened]
    for _, writer in opened:
        writer.close()
    # Past the bound the longest-waiting are closed at once, some before the server read them
    # (silently, or reset); the others with 408 at the timeout.
    assert set(answers) <= {REQUEST_TIMEOUT, b""}
    assert answers.count(REQUEST_TIMEOUT) >= AWAITING - 10
    log = example.log.read_text()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]

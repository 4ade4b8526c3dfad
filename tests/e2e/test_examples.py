"""The README's examples against a running demo stack: examples/client.py in both protocol
revisions (the browser step done by mock_providers/testing/browser.py) and examples/curl_session.sh."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process

from mock_providers import mint_access_token
from mock_providers.testing.browser import Browser
from mock_providers.testing.servers import DemoServers
from tests.needs import need_binary

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "examples" / "client.py"
CURL_SESSION = REPO / "examples" / "curl_session.sh"
URL_LINE = re.compile(r"^\s+(http://\S+/connect\?elicitationId=\S+)$")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


class ClientRun:
    """examples/client.py as a newcomer runs it, its output collected line by line."""

    def __init__(self, servers: DemoServers, *args: str) -> None:
        self.command = [
            sys.executable,
            str(CLIENT),
            "--server",
            servers.mcp_url,
            "--data-dir",
            str(servers.data_dir),
            *args,
        ]
        self.lines: list[str] = []
        self.stderr = ""

    async def connect_url(self, process: Process) -> str:
        """Read stdout up to the printed connect URL."""
        assert process.stdout is not None
        buffered = ""
        async for chunk in process.stdout:
            buffered += chunk.decode()
            *complete, buffered = buffered.split("\n")
            self.lines += complete
            for line in complete:
                if match := URL_LINE.match(line):
                    return match.group(1)
        raise AssertionError(f"no connect URL in {self.lines}")

    async def finish(self, process: Process) -> int:
        assert process.stdout is not None and process.stderr is not None
        rest = b"".join([chunk async for chunk in process.stdout])
        self.lines += rest.decode().splitlines()
        self.stderr = b"".join([chunk async for chunk in process.stderr]).decode()
        return await process.wait()

    @property
    def stdout(self) -> str:
        return "\n".join(self.lines)


async def _connect_with_client(
    servers: DemoServers, browser: Browser, *args: str, decision: str = "approve"
) -> tuple[ClientRun, int]:
    run = ClientRun(servers, *args)
    with anyio.fail_after(60):
        async with await anyio.open_process(run.command, env=_env()) as process:
            url = await run.connect_url(process)
            page = await browser.complete_connect(url, username="alice", decision=decision)
            assert page.status_code in (200, 400), page.text
            code = await run.finish(process)
    return run, code


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_example_client_connects_without_waiting_for_enter(
    servers: DemoServers, browser: Browser, mode: str
) -> None:
    run, code = await _connect_with_client(servers, browser, "--mode", mode)
    assert code == 0, run.stdout + run.stderr
    assert '"login": "octocat"' in run.stdout
    assert "Press Enter" not in run.stdout

    # The README's second run: --disconnect first, so a fresh flow shows a new URL.
    again, code = await _connect_with_client(servers, browser, "--mode", mode, "--disconnect")
    assert code == 0, again.stdout + again.stderr
    assert "Disconnected mockhub: " in again.stdout
    assert '"login": "octocat"' in again.stdout


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_example_client_denied_flow_ends_with_one_line(
    servers: DemoServers, browser: Browser, mode: str
) -> None:
    run, code = await _connect_with_client(
        servers, browser, "--mode", mode, "--timeout", "3", decision="deny"
    )
    assert code == 1
    assert "Traceback" not in run.stderr and "ExceptionGroup" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "declined" in run.stderr or "Run the client again" in run.stderr


def test_example_client_without_the_venv_says_so_in_one_line() -> None:
    # -S: no site-packages, as with a system python that lacks the project's dependencies.
    run = subprocess.run(
        [sys.executable, "-S", str(CLIENT)], capture_output=True, text=True, timeout=30, check=False
    )
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [run.stderr.strip()]
    assert ".venv/bin/python examples/client.py" in run.stderr


def test_curl_session_shows_the_whole_raw_exchange(servers: DemoServers) -> None:
    need_binary("curl")
    token = mint_access_token(servers.data_dir, "alice")
    env = {**os.environ, "MCP_URL": servers.mcp_url, "TOKEN": token}
    run = subprocess.run(
        ["bash", str(CURL_SESSION)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert re.search(r"^< Mcp-Session-Id: [0-9a-f]{32}$", out, re.MULTILINE), out
    assert out.index('"method":"initialize"') < out.index('"method":"notifications/initialized"')
    assert "< HTTP 202" in out  # the notification is accepted, no body
    assert '"code":-32042' in out and f"{servers.public_url}/connect?elicitationId=" in out

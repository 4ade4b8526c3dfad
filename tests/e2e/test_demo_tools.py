"""`mcp-url-connect demo` serves docs/tools.md's own `github` tool package as printed: the demo
configures the `github` preset through MockHub's stand-in for GitHub's API, so the package's tool
is registered and answers after the connect flow (it was silently not served while the demo had
only `mockhub`)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mock_providers.testing.browser import ScriptedUser
from mock_providers.testing.client import accept, connect_url, mcp_client, retry
from mock_providers.testing.servers import free_port
from tests.support.settle import eventually, succeeds

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def first_tool_package_of_the_docs() -> str:
    """The `acme_tools/__init__.py` docs/tools.md shows: its first Python block."""
    block = re.search(r"```python\n(.*?)```", (ROOT / "docs" / "tools.md").read_text(), re.S)
    assert block is not None and "def register(" in block.group(1)
    return block.group(1)


@dataclass(frozen=True)
class RunningDemo:
    data_dir: Path
    mcp_url: str


def wait_for_listener(port: int) -> None:
    def connect() -> None:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()

    eventually(lambda: succeeds(connect, OSError), f"a listener on {port}", within=30.0, poll=0.1)


@dataclass(frozen=True)
class Demo:
    """A running `mcp-url-connect demo` serving the docs' package; its output goes to `log`."""

    target: RunningDemo
    port: int
    log: Path


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    package = tmp_path / "site" / "acme_tools"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(first_tool_package_of_the_docs())
    port, providers_port, metrics_port = free_port(), free_port(), free_port()
    data_dir, log = tmp_path / "data", tmp_path / "demo.log"
    command = [sys.executable, "-m", "service.ops.cli", "demo", "--data-dir", str(data_dir)]
    command += [
        "--port",
        str(port),
        "--providers-port",
        str(providers_port),
        "--metrics-port",
        str(metrics_port),
    ]
    command += ["--tools", "acme_tools:register"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path / 'site'}"}
    with log.open("w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for_listener(port)
        wait_for_listener(providers_port)
        yield Demo(RunningDemo(data_dir, f"http://127.0.0.1:{port}/mcp"), port, log)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)


async def test_demo_serves_the_documented_github_tool_package(demo: Demo) -> None:
    async with mcp_client(demo.target, "alice", "legacy", on_url=accept) as (client, recorder):
        assert "my_issues" in {tool.name for tool in (await client.list_tools()).tools}
        link = await connect_url(client, "my_issues", {})
        assert link.url.startswith(f"http://127.0.0.1:{demo.port}/connect")
        await ScriptedUser("alice").approve(link.url, login="octocat")
        await recorder.wait_completed(link.elicitation_id)
        result = await retry(client, link, "my_issues", {})
    assert not result.is_error, result
    assert result.structured_content == {"result": []}  # nobody is assigned acme/widgets' issues
    output = demo.log.read_text()
    assert "tool package registered: MCPUC_TOOLS 'acme_tools:register'" in output
    assert "Provider 'github'" in output  # the banner names the provider and its stand-in

"""The testing kit itself (mock_providers.testing): the plugin's registration, the integrator
example as documented, the scope option, the provider knobs and the scripted user's errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from mock_providers.testing import FlowError, Mcpuc
from mock_providers.testing.plugin import __name__ as PLUGIN

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "test_integrator_example.py"
DOC = ROOT / "docs" / "testing.md"


def run_pytest(*args: str) -> subprocess.CompletedProcess[str]:
    """pytest in a child process, with the kit's plugin (by its entry point once installed)."""
    installed = any(ep.value == PLUGIN for ep in entry_points(group="pytest11"))
    plugin = [] if installed else ["-p", PLUGIN]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_pyproject_registers_the_plugin() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"mcpuc": PLUGIN}
    assert any(dep.startswith("pytest-asyncio") for dep in project["optional-dependencies"]["testing"])


def test_the_documented_example_is_the_example_file() -> None:
    doc = DOC.read_text()
    found = re.search(
        r"<!-- example: examples/test_integrator_example.py -->\n```python\n(.*?)```\n", doc, re.S
    )
    assert found is not None, "docs/testing.md lost its example block"
    assert found.group(1) == EXAMPLE.read_text()


def test_the_example_passes_as_written() -> None:
    result = run_pytest(str(EXAMPLE))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "6 passed" in result.stdout, result.stdout[-500:]


def test_module_scope_shares_one_stack(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "seen = []\n\n"
        "def test_one(mcpuc):\n    seen.append(mcpuc.mcp_url)\n\n"
        "def test_two(mcpuc):\n    seen.append(mcpuc.mcp_url)\n    assert seen[0] == seen[1]\n\n"
        "def test_other_module_scope_is_fresh(mcpuc):\n    assert mcpuc.mcp_url in seen\n"
    )
    assert run_pytest("--mcpuc-scope=module", str(probe)).returncode == 0
    per_test = run_pytest(str(probe))
    assert per_test.returncode == 1 and "assert" in per_test.stdout  # by default each test has its own


async def test_auto_mode_connects_through_the_same_helpers(mcpuc: Mcpuc) -> None:
    async with mcpuc.client("carol", mode="auto") as client:
        link = await mcpuc.connect_url(client, "whoami", {})
        page = await mcpuc.browser("carol").approve(link.url)
        assert "Connected to MockHub" in page.text
        result = await mcpuc.retry(client, link, "whoami", {})
        assert result.structured_content["login"] == "octocat"


async def test_flow_error_names_the_page_reached(mcpuc: Mcpuc) -> None:
    async with mcpuc.client("dave", mode="legacy") as client:
        link = await mcpuc.connect_url(client, "whoami", {})
        await mcpuc.browser("dave").approve(link.url)
        with pytest.raises(FlowError) as used:  # the link is spent
            await mcpuc.browser("dave").approve(link.url)
        assert used.value.page != "" and used.value.status >= 400
        assert used.value.page in str(used.value)
        with pytest.raises(FlowError, match="expected the denied page"):
            await mcpuc.browser("dave").deny(link.url)


async def test_provider_knobs_reach_mockhub(mcpuc: Mcpuc) -> None:
    async with mcpuc.client("erin", mode="legacy") as client:
        link = await mcpuc.connect_url(client, "whoami", {})
        await mcpuc.browser("erin").approve(link.url)
        await mcpuc.retry(client, link, "whoami", {})

        mcpuc.providers.slow_api(0.3)
        began = time.perf_counter()
        assert not (await client.call_tool("whoami", {})).is_error
        assert time.perf_counter() - began >= 0.3
        mcpuc.providers.slow_api(0)

        revoked_before = mcpuc.providers.revocations
        assert mcpuc.providers.revoke("octocat") >= 1
        assert mcpuc.providers.revocations > revoked_before
        gone = await client.call_tool("whoami", {})  # found dead during the call: a tool error
        assert gone.is_error and (gone.structured_content or {}).get("reconnect") is True
        again = await mcpuc.connect_url(client, "whoami", {})  # the next call asks again
        assert again.elicitation_id != link.elicitation_id
        await mcpuc.browser("erin").approve(again.url)
        await mcpuc.retry(client, again, "whoami", {})

        mcpuc.providers.fail_token_endpoint("500")
        mcpuc.providers.expire_access_tokens()
        before = mcpuc.providers.refreshes
        failed = await client.call_tool("whoami", {})
        assert failed.is_error and "refused the refresh" in str(failed.content)
        assert mcpuc.providers.refreshes == before + 1  # tried once, failed closed

"""An operator's tool package, installed beside ours, served by the real `demo` and `serve`
commands with only a setting (or only its entry point), on both revisions: the whole flow runs
through the package's tool. A package that cannot be loaded stops the command with one line."""

from __future__ import annotations

import os
import subprocess
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mock_providers.testing import MODES, ScriptedUser, connect_url, mcp_client, retry
from mock_providers.testing.client import accept
from mock_providers.testing.cluster import CLI, wait_for
from mock_providers.testing.servers import HOST, free_port

pytestmark = pytest.mark.e2e

TOOL = """
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_url_connect import ConnectionBroker, ProviderSession, uses


def register(server: MCPServer[Any], broker: ConnectionBroker) -> None:
    @server.tool(description="The caller's MockHub login.")
    @uses(broker.session, "mockhub", scopes=("read:user",))
    async def {tool}(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
        return {{"login": (await api.get_json(api.provider.userinfo_url))["login"]}}
"""


def installed_site(root: Path) -> Path:
    """A site directory as pip leaves it: `acme_tools` (named by the setting) and `beta_tools`,
    a distribution whose `mcp_url_connect.tools` entry point names its `register`."""
    site = root / "site"
    for package, tool in (("acme_tools", "acme_login"), ("beta_tools", "beta_login")):
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text(textwrap.dedent(TOOL.format(tool=tool)))
    dist_info = site / "beta_tools-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: beta-tools\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text("[mcp_url_connect.tools]\nbeta = beta_tools:register\n")
    return site


def environment(site: Path, **settings: str) -> dict[str, str]:
    repo = Path(__file__).resolve().parents[2]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(repo)]), **settings}


@dataclass(frozen=True)
class Running:
    """What `mcp_client` needs: the MCP endpoint and the data dir holding the dev AS keys."""

    mcp_url: str
    data_dir: Path


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([*CLI, *args], stdout=out, stderr=subprocess.STDOUT, env=env)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed_site(tmp_path_factory.mktemp("tool-packages"))


@pytest.fixture(scope="module")
def demo(site: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("demo")
    port, providers_port = free_port(), free_port()
    args = ["demo", "--port", str(port), "--providers-port", str(providers_port), "--data-dir", str(root)]
    process = spawn(args, environment(site, MCPUC_TOOLS="acme_tools:register"), root / "demo.log")
    try:
        wait_for(f"http://{HOST}:{port}/readyz", process, root / "demo.log")
        yield Running(f"http://{HOST}:{port}/mcp", root)
    finally:
        stop(process)


@pytest.fixture(scope="module")
def providers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    """`mock-providers` for one `serve` replica on a port chosen here; its data dir and that port."""
    root = tmp_path_factory.mktemp("providers")
    port, mcp_port = free_port(), free_port()
    args = ["mock-providers", "--host", HOST, "--port", str(port)]
    args += ["--mcp-public-url", f"http://{HOST}:{mcp_port}", "--data-dir", str(root)]
    process = spawn(args, dict(os.environ), root / "providers.log")
    try:
        wait_for(f"http://{HOST}:{port}/.well-known/openid-configuration", process, root / "providers.log")
        yield root, mcp_port
    finally:
        stop(process)


def serve_environment(site: Path, data_dir: Path, port: int, **settings: str) -> dict[str, str]:
    written = dict(line.split("=", 1) for line in (data_dir / "serve.env").read_text().splitlines())
    return environment(site, **written, MCPUC_HOST=HOST, MCPUC_PORT=str(port), **settings)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tool", ["acme_login", "beta_login"])
async def test_demo_serves_a_package_named_by_the_setting_or_by_its_entry_point(
    demo: Running, mode: str, tool: str
) -> None:
    user = ScriptedUser(f"{tool}-{mode}")
    async with mcp_client(demo, user.user, mode, on_url=accept) as (client, _):
        link = await connect_url(client, tool)
        await user.approve(link.url, login="octocat")
        result = await retry(client, link, tool)
        assert result.structured_content == {"login": "octocat"}


async def test_serve_serves_a_package_named_by_the_setting(site: Path, providers: tuple[Path, int]) -> None:
    data_dir, port = providers
    env = serve_environment(site, data_dir, port, MCPUC_TOOLS="acme_tools:register")
    process = spawn(["serve"], env, data_dir / "serve.log")
    try:
        wait_for(f"http://{HOST}:{port}/readyz", process, data_dir / "serve.log")
        running = Running(f"http://{HOST}:{port}/mcp", data_dir)
        user = ScriptedUser("serve-user")
        async with mcp_client(running, user.user, MODES[0], on_url=accept) as (client, _):
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert {"acme_login", "beta_login", "whoami"} <= tools
            link = await connect_url(client, "acme_login")
            await user.approve(link.url, login="octocat")
            assert (await retry(client, link, "acme_login")).structured_content == {"login": "octocat"}
    finally:
        stop(process)
    assert (
        "tool package registered: MCPUC_TOOLS 'acme_tools:register'" in (data_dir / "serve.log").read_text()
    )


@pytest.mark.parametrize("command", ["serve", "demo"])
def test_a_package_that_cannot_be_loaded_stops_the_command_with_one_line(
    site: Path, providers: tuple[Path, int], tmp_path: Path, command: str
) -> None:
    data_dir, port = providers
    settings = {"MCPUC_TOOLS": "acme_tools:register, acme_tools:absent"}
    if command == "serve":
        env = serve_environment(site, data_dir, port, **settings)
        args = ["serve"]
    else:
        env = environment(site, **settings)
        args = ["demo", "--port", str(free_port()), "--providers-port", str(free_port())]
        args += ["--data-dir", str(tmp_path)]
    done = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (
        "mcp-url-connect: configuration error: MCPUC_TOOLS 'acme_tools:absent': "
        "'acme_tools' has no attribute 'absent'"
    )

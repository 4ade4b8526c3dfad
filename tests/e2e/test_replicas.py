"""Two `mcp-url-connect serve` processes sharing Redis, behind real nginx configured from
deploy/nginx/nginx.conf, with `mcp-url-connect mock-providers` as the issuer and provider.

- 2025-11-25: the client's session lives on one replica; the browser's callback is sent to the
  other; the completion still reaches the client (Redis pub/sub) and the retry succeeds.
- 2026-07-28: a stateless client completes the flow with its requests spread over both.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import pytest

from tests.e2e.browser import Browser
from tests.e2e.harness import HOST, free_port
from tests.e2e.mcp_client import mcp_client
from tests.e2e.test_connect_flow import legacy_elicitation
from tests.e2e.test_connect_hardening import _callback_location
from tests.needs import delete_prefix, need_binary, need_redis

pytestmark = pytest.mark.e2e
NGINX_CONF = Path(__file__).parents[2] / "deploy" / "nginx" / "nginx.conf"
REPLICAS = ("mcp-1", "mcp-2")
CLI = [sys.executable, "-m", "service.cli"]


def wait_for(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"process exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer: {log.read_text()[-2000:]}")


@dataclass
class Cluster:
    root: Path
    redis_url: str
    nginx_bin: str
    nginx_port: int = field(default_factory=free_port)
    providers_port: int = field(default_factory=free_port)
    ports: dict[str, int] = field(default_factory=lambda: {r: free_port() for r in REPLICAS})
    key_prefix: str = field(default_factory=lambda: f"test-{uuid.uuid4().hex[:12]}:")
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def mcp_url(self) -> str:
        return f"http://{HOST}:{self.nginx_port}/mcp"

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def _spawn(
        self, name: str, args: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        with self.log(name).open("wb") as out:
            process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.processes.append(process)
        return process

    def start(self) -> Cluster:
        public = f"http://{HOST}:{self.nginx_port}"
        providers = self._spawn(
            "mock-providers",
            [
                *CLI,
                "mock-providers",
                *("--host", HOST, "--port", str(self.providers_port)),
                *("--mcp-public-url", public, "--data-dir", str(self.data_dir)),
            ],
        )
        wait_for(
            f"http://{HOST}:{self.providers_port}/.well-known/openid-configuration",
            providers,
            self.log("mock-providers"),
        )
        serve_env = dict(
            line.split("=", 1) for line in (self.data_dir / "serve.env").read_text().splitlines()
        )
        for name in REPLICAS:
            env = {
                **os.environ,
                **serve_env,
                "MCPUC_STORE_URL": self.redis_url,
                "MCPUC_REDIS_PREFIX": self.key_prefix,
                "MCPUC_REPLICA_ID": name,
                "MCPUC_HOST": HOST,
                "MCPUC_PORT": str(self.ports[name]),
            }
            replica = self._spawn(name, [*CLI, "serve"], env)
            wait_for(f"http://{HOST}:{self.ports[name]}/readyz", replica, self.log(name))
        self._start_nginx()
        return self

    def _start_nginx(self) -> None:
        conf = NGINX_CONF.read_text()
        for token, value in {
            "listen 8080;": f"listen {HOST}:{self.nginx_port};",
            "server mcp-1:8000 ": f"server {HOST}:{self.ports['mcp-1']} ",
            "server mcp-2:8000 ": f"server {HOST}:{self.ports['mcp-2']} ",
            "server mock-providers:8001;": f"server {HOST}:{self.providers_port};",
        }.items():
            assert token in conf, f"deploy/nginx/nginx.conf no longer contains {token!r}"
            conf = conf.replace(token, value)
        prefix = self.root / "nginx"
        (prefix / "logs").mkdir(parents=True, exist_ok=True)
        (prefix / "nginx.conf").write_text(conf)
        nginx = self._spawn(
            "nginx",
            [self.nginx_bin, "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"],
        )
        wait_for(f"http://{HOST}:{self.nginx_port}/healthz", nginx, self.log("nginx"))

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        delete_prefix(self.key_prefix)

    def mcp_posts(self, name: str) -> int:
        """MCP requests a replica served, from its own access log."""
        return self.log(name).read_text().count('"POST /mcp')


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    redis_url = need_redis()
    nginx = need_binary("nginx")
    running = Cluster(tmp_path_factory.mktemp("cluster"), redis_url, nginx)
    try:
        yield running.start()
    finally:
        running.stop()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    b = Browser()
    yield b
    await b.aclose()


async def _accept(params: Any) -> str:
    return "accept"


async def test_callback_on_the_other_replica_still_notifies_the_session(
    cluster: Cluster, browser: Browser
) -> None:
    async with mcp_client(cluster, "alice", "legacy", on_url=_accept) as (client, recorder):
        error = await legacy_elicitation(client)
        elicitation = error.elicitations[0]
        [session_id] = recorder.session_ids
        holder = session_id.split(".", 1)[0]  # the affinity prefix names the replica
        assert holder in REPLICAS
        other = next(name for name in REPLICAS if name != holder)

        location = urlsplit(await _callback_location(cluster, browser, elicitation.url))
        direct = urlunsplit(location._replace(netloc=f"{HOST}:{cluster.ports[other]}"))
        page = await browser.get(direct)  # the callback lands on the replica without the session
        assert page.status_code == 200, page.text
        assert "/callback/mockhub" in cluster.log(other).read_text()
        assert "/callback/mockhub" not in cluster.log(holder).read_text()

        with anyio.fail_after(10):
            await recorder.completed.wait()
        assert recorder.completed_ids() == [elicitation.elicitation_id]
        result = await client.call_tool("whoami", {})
        assert not result.is_error
        assert result.structured_content is not None
        assert result.structured_content["login"] == "octocat"
        await anyio.sleep(0.3)
        assert recorder.completed_ids() == [elicitation.elicitation_id]  # exactly once


async def test_stateless_client_is_served_by_both_replicas(cluster: Cluster, browser: Browser) -> None:
    before = {name: cluster.mcp_posts(name) for name in REPLICAS}

    async def open_in_browser(params: Any) -> str:
        page = await browser.complete_connect(params.url, username="bob")
        assert page.status_code == 200
        return "accept"

    async with mcp_client(cluster, "bob", "2026-07-28", on_url=open_in_browser) as (client, recorder):
        for _ in range(3):
            await client.list_tools()
        result = await client.call_tool("whoami", {})
        assert not result.is_error, result
        assert recorder.session_ids == set()  # stateless: no session
    served = {name: cluster.mcp_posts(name) - before[name] for name in REPLICAS}
    assert all(count > 0 for count in served.values()), served

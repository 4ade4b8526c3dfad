"""Two `serve` replicas sharing Redis, behind real nginx configured from deploy/nginx/nginx.conf.

- 2025-11-25: the client's session lives on one replica; the browser's callback is sent to the
  other; the completion still reaches the client (Redis pub/sub) and the retry succeeds.
- 2026-07-28: a stateless client completes the flow with its requests spread over both.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from mock_providers import create_mock_providers_app
from service.app import create_app
from service.demo import Demo, build_dev_setup
from tests.e2e.browser import Browser
from tests.e2e.harness import HOST, ThreadedServers, free_port
from tests.e2e.mcp_client import mcp_client
from tests.e2e.test_connect_flow import legacy_elicitation
from tests.e2e.test_connect_hardening import _callback_location
from tests.needs import delete_prefix, need_binary, need_redis

pytestmark = pytest.mark.e2e
NGINX_CONF = Path(__file__).parents[2] / "deploy" / "nginx" / "nginx.conf"
REPLICAS = ("mcp-1", "mcp-2")


class CountingApp:
    """Counts the MCP requests a replica serves."""

    def __init__(self, app: ASGIApp) -> None:
        self.app, self.mcp_requests = app, 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/mcp"):
            self.mcp_requests += 1
        await self.app(scope, receive, send)


@dataclass
class Cluster:
    data_dir: Path
    redis_url: str
    nginx_bin: str
    nginx_port: int = field(default_factory=free_port)
    providers_port: int = field(default_factory=free_port)
    ports: dict[str, int] = field(default_factory=lambda: {r: free_port() for r in REPLICAS})
    replicas: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, CountingApp] = field(default_factory=dict)
    setup: Demo = field(init=False)

    @property
    def mcp_url(self) -> str:
        return f"http://{HOST}:{self.nginx_port}/mcp"

    def start(self, prefix: Path) -> Cluster:
        self.setup = build_dev_setup(
            f"http://{HOST}:{self.nginx_port}", f"http://{HOST}:{self.providers_port}", self.data_dir
        )
        key_prefix = self.key_prefix = f"test-{uuid.uuid4().hex[:12]}:"
        apps: list[tuple[Any, int]] = [(create_mock_providers_app(self.setup.providers), self.providers_port)]
        for name in REPLICAS:
            settings = replace(
                self.setup.settings, store_url=self.redis_url, redis_prefix=key_prefix, replica_id=name
            )
            app = create_app(settings.validate())
            self.replicas[name] = app
            self.counters[name] = CountingApp(app)
            apps.append((self.counters[name], self.ports[name]))
        self._servers = ThreadedServers(apps)
        self._servers.start()
        self._nginx = self._start_nginx(prefix)
        return self

    def _start_nginx(self, prefix: Path) -> subprocess.Popen[bytes]:
        conf = NGINX_CONF.read_text()
        for token, value in {
            "listen 8080;": f"listen {HOST}:{self.nginx_port};",
            "server mcp-1:8000;": f"server {HOST}:{self.ports['mcp-1']};",
            "server mcp-2:8000;": f"server {HOST}:{self.ports['mcp-2']};",
            "server mock-providers:8001;": f"server {HOST}:{self.providers_port};",
        }.items():
            assert token in conf, f"deploy/nginx/nginx.conf no longer contains {token!r}"
            conf = conf.replace(token, value)
        (prefix / "tmp").mkdir(parents=True, exist_ok=True)
        (prefix / "logs").mkdir(exist_ok=True)
        (prefix / "nginx.conf").write_text(conf)
        process = subprocess.Popen(
            [self.nginx_bin, "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://{HOST}:{self.nginx_port}/healthz", timeout=1).status_code == 200:
                    return process
            except httpx.HTTPError:
                time.sleep(0.05)
        process.kill()
        raise RuntimeError("nginx did not start")

    def stop(self) -> None:
        self._nginx.terminate()
        self._nginx.wait(timeout=10)
        self._servers.stop()
        delete_prefix(self.key_prefix)

    def holder_of(self, elicitation_id: str) -> str:
        """The replica whose CompletionHub registered the elicitation (holds the MCP session)."""
        [holder] = [n for n, app in self.replicas.items() if elicitation_id in app.state.runtime.hub._entries]
        return holder


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    redis_url = need_redis()
    nginx = need_binary("nginx")
    running = Cluster(tmp_path / "data", redis_url, nginx).start(tmp_path / "nginx")
    # Each replica subscribes to the completion channel at start-up.
    deadline = time.monotonic() + 5
    while not all(app.state.runtime.completions.subscribed.is_set() for app in running.replicas.values()):
        assert time.monotonic() < deadline, "replicas did not subscribe to the completion channel"
        time.sleep(0.02)
    yield running
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
        holder = cluster.holder_of(elicitation.elicitation_id or "")
        other = next(name for name in REPLICAS if name != holder)

        location = urlsplit(await _callback_location(cluster, browser, elicitation.url))  # type: ignore[arg-type]
        direct = urlunsplit(location._replace(netloc=f"{HOST}:{cluster.ports[other]}"))
        page = await browser.get(direct)  # the callback lands on the replica without the session
        assert page.status_code == 200, page.text

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
    async def open_in_browser(params: Any) -> str:
        page = await browser.complete_connect(params.url, username="bob")
        assert page.status_code == 200
        return "accept"

    async with mcp_client(cluster, "bob", "2026-07-28", on_url=open_in_browser) as (client, _):
        for _ in range(3):
            await client.list_tools()
        result = await client.call_tool("whoami", {})
        assert not result.is_error, result
    assert all(counter.mcp_requests > 0 for counter in cluster.counters.values()), {
        name: c.mcp_requests for name, c in cluster.counters.items()
    }

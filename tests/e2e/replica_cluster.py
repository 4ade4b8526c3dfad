"""Two `mcp-url-connect serve` processes sharing Redis behind real nginx configured from
deploy/nginx/nginx.conf, with `mcp-url-connect mock-providers` as the issuer and provider: the
process-level stack tests/e2e/test_replicas.py runs (the in-process one is mock_providers.testing)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from mock_providers.testing.servers import HOST, free_port
from tests.needs import delete_prefix

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

"""Two `mcp-url-connect serve` processes sharing Redis behind the router (real nginx running
deploy/nginx/nginx.conf as rendered for Kubernetes, mock_providers/testing/router.py), with
`mcp-url-connect mock-providers` as the issuer and provider: the process-level stack that
tests/e2e/test_replicas.py, the drain and rolling-restart tests and scripts/drill.py run (the
in-process one is mock_providers.testing.DemoServers).

Everything listens on loopback: the replicas on 127.0.0.1 and 127.0.0.2 (one port, as pods
share one), found by the router through a DNS server of the cluster's own (`dns`), which answers
the names the headless Service gives in Kubernetes. With ``redis_url=None`` the cluster runs a
redis-server of its own (AOF on, ``appendfsync always``, as docs/redis.md recommends), which it
can restart; with a shared Redis it uses a unique key prefix and deletes it at the end. With
``postgres_url`` the replicas share that PostgreSQL database alone (store and completion bus) and
no Redis runs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

from mock_providers.testing.dns import DnsServer
from mock_providers.testing.router import any_replica_name, replica_name, router_conf
from mock_providers.testing.servers import HOST, free_port

REPLICAS = ("mcp-1", "mcp-2")
# mcp-1 on the public URL's loopback address: tests that reach it directly pass the server's
# DNS-rebinding check (its Host must be the public host or loopback's 127.0.0.1).
REPLICA_ADDRESSES = {"mcp-1": "127.0.0.1", "mcp-2": "127.0.0.2"}
CLI = [sys.executable, "-m", "service.ops.cli"]
START_SECONDS = 20.0
# The router caches a replica's address for `valid=2s` (deploy/nginx/nginx.conf): a rolling
# restart waits that long, and a little more, after a replica is ready before stopping the next.
SETTLE_SECONDS = 3.0
# Then requests through nginx, each on a new connection so that every worker gets some: a worker
# forgets a replica's failure only once a request to it has completed (docs/deploy.md, "Rolling
# restart", step 3).
WARM_UP_REQUESTS = 16


def wait_for(url: str, process: subprocess.Popen[bytes], log: Path, seconds: float = START_SECONDS) -> None:
    """Until `url` answers 200; RuntimeError (with the log's tail) if `process` exits first."""
    deadline = time.monotonic() + seconds
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


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


@dataclass
class Cluster:
    """``serve_command`` replaces ``mcp-url-connect serve`` (e.g. a wrapper adding a test tool);
    ``environ`` adds MCPUC_* settings to every replica."""

    root: Path
    redis_url: str | None
    nginx_bin: str
    serve_command: Sequence[str] = (*CLI, "serve")
    environ: dict[str, str] = field(default_factory=dict)
    postgres_url: str | None = None
    nginx_port: int = field(default_factory=free_port)
    providers_port: int = field(default_factory=free_port)
    redis_port: int = field(default_factory=free_port)
    # One port for every replica, each on its own address (REPLICA_ADDRESSES, or where
    # `move_replica` put it).
    replica_port: int = field(default_factory=free_port)
    addresses: dict[str, str] = field(default_factory=lambda: dict(REPLICA_ADDRESSES))
    dns: DnsServer = field(default_factory=DnsServer)
    # Each replica's GET /metrics port (serve's default, 9464, would be shared by all of them).
    metrics_ports: dict[str, int] = field(default_factory=lambda: {r: free_port() for r in REPLICAS})
    key_prefix: str = field(default_factory=lambda: f"test-{uuid.uuid4().hex[:12]}:")
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def ports(self) -> dict[str, int]:
        return {name: self.replica_port for name in REPLICAS}

    def replica_url(self, name: str) -> str:
        """Replica `name` reached directly, not through the router."""
        return f"http://{self.addresses[name]}:{self.replica_port}"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def mcp_url(self) -> str:
        return f"http://{HOST}:{self.nginx_port}/mcp"

    @property
    def providers_url(self) -> str:
        return f"http://{HOST}:{self.providers_port}"

    @property
    def store_url(self) -> str:
        return self.postgres_url or self.redis_url or f"redis://{HOST}:{self.redis_port}/0"

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def _spawn(
        self, name: str, args: Sequence[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        with self.log(name).open("ab") as out:
            # Our own commands (this interpreter, nginx, redis-server), no shell.
            process = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT, env=env)  # noqa: S603
        self.processes[name] = process
        return process

    def start(self) -> Cluster:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.redis_url is None and self.postgres_url is None:
            self.start_redis()
        providers = self._spawn(
            "mock-providers",
            [
                *CLI,
                "mock-providers",
                *("--host", HOST, "--port", str(self.providers_port)),
                *("--mcp-public-url", f"http://{HOST}:{self.nginx_port}"),
                *("--data-dir", str(self.data_dir)),
            ],
        )
        discovery = f"{self.providers_url}/.well-known/openid-configuration"
        wait_for(discovery, providers, self.log("mock-providers"))
        for name in REPLICAS:
            self.start_replica(name)
        self.publish_dns()
        self._start_nginx()
        return self

    def publish_dns(self) -> None:
        """What the headless Service publishes: every replica under the shared name, and each
        under its own."""
        self.dns.set(any_replica_name(), [self.addresses[name] for name in REPLICAS])
        for name in REPLICAS:
            self.dns.set(replica_name(name), [self.addresses[name]])

    def move_replica(self, name: str, address: str) -> None:
        """A rollout that recreates replica `name` at a new address: stop it (SIGTERM), start it
        on `address`, and publish the new address."""
        self.stop_replica(name)
        self.addresses[name] = address
        self.start_replica(name)
        self.publish_dns()

    def serve_env(self) -> dict[str, str]:
        """The environment of `serve` (and `keys rotate`): what mock-providers wrote, the store,
        and ``environ``."""
        written = dict(line.split("=", 1) for line in (self.data_dir / "serve.env").read_text().splitlines())
        return {
            **os.environ,
            **written,
            "MCPUC_STORE_URL": self.store_url,
            "MCPUC_REDIS_PREFIX": self.key_prefix,
            **self.environ,
        }

    def start_replica(self, name: str) -> None:
        """Start (or start again, on the same port) replica `name`; returns once it is ready."""
        env = {
            **self.serve_env(),
            "MCPUC_REPLICA_ID": name,
            "MCPUC_HOST": self.addresses[name],
            "MCPUC_PORT": str(self.replica_port),
            "MCPUC_METRICS_PORT": str(self.metrics_ports[name]),
        }
        replica = self._spawn(name, self.serve_command, env)
        wait_for(f"{self.replica_url(name)}/readyz", replica, self.log(name))

    def stop_replica(self, name: str, sig: signal.Signals = signal.SIGTERM, seconds: float = 30.0) -> int:
        """Send `sig` to replica `name` and wait for it to exit; its exit status."""
        process = self.processes[name]
        process.send_signal(sig)
        return process.wait(timeout=seconds)

    def rolling_restart(self, settle_seconds: float = SETTLE_SECONDS) -> dict[str, float]:
        """docs/deploy.md, "Rolling restart": one replica at a time, SIGTERM (it drains), start it
        again, wait until it is ready and nginx's failure window has passed, then the next.
        Returns how long each replica took to stop."""
        stopping: dict[str, float] = {}
        for name in REPLICAS:
            started = time.monotonic()
            self.stop_replica(name)
            stopping[name] = time.monotonic() - started
            self.start_replica(name)
            time.sleep(settle_seconds)
            self.warm_up_through_nginx()
        return stopping

    def warm_up_through_nginx(self, requests: int = WARM_UP_REQUESTS) -> None:
        """`GET /healthz` through nginx `requests` times, a new connection each (docs/deploy.md)."""
        for _ in range(requests):
            httpx.get(f"http://{HOST}:{self.nginx_port}/healthz", timeout=5).raise_for_status()

    def keys_rotate(self) -> str:
        """`mcp-url-connect keys rotate` with the replicas' settings; what it printed."""
        done = subprocess.run(  # noqa: S603 - this interpreter and our CLI
            [*CLI, "keys", "rotate"],
            env=self.serve_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout.strip()

    def start_redis(self) -> None:
        directory = self.root / "redis"
        directory.mkdir(parents=True, exist_ok=True)
        server = shutil.which("redis-server") or "/usr/bin/redis-server"
        self._spawn(
            "redis",
            [
                server,
                *("--port", str(self.redis_port), "--bind", HOST, "--dir", str(directory)),
                *("--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no"),
            ],
        )
        deadline = time.monotonic() + 10
        while True:
            client = redis.Redis(host=HOST, port=self.redis_port, socket_timeout=1)
            try:
                if client.ping():
                    return
            except (redis.RedisError, OSError):
                if time.monotonic() > deadline:
                    tail = self.log("redis").read_text()[-2000:]
                    raise RuntimeError(f"redis-server did not start: {tail}") from None
                time.sleep(0.05)
            finally:
                client.close()

    def restart_redis(self) -> None:
        """Stop the cluster's own redis-server (SIGTERM: it flushes its AOF) and start it again."""
        assert self.redis_url is None, "only the cluster's own Redis can be restarted"
        process = self.processes["redis"]
        process.terminate()
        process.wait(timeout=10)
        self.start_redis()

    def _start_nginx(self) -> None:
        conf = router_conf(f"{HOST}:{self.nginx_port}", self.dns.address, self.replica_port)
        prefix = self.root / "nginx"
        (prefix / "logs").mkdir(parents=True, exist_ok=True)
        (prefix / "nginx.conf").write_text(conf)
        nginx = self._spawn(
            "nginx",
            [self.nginx_bin, "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"],
        )
        wait_for(f"http://{HOST}:{self.nginx_port}/healthz", nginx, self.log("nginx"))

    def stop(self) -> None:
        for process in reversed(self.processes.values()):
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.dns.close()
        # A private Sentinel group or Redis Cluster goes with its test session.
        if (
            self.redis_url is not None
            and self.postgres_url is None
            and "+" not in self.redis_url.split(":")[0]
        ):
            self._delete_prefix()

    def _delete_prefix(self) -> None:
        client = redis.Redis.from_url(self.store_url, socket_timeout=5)
        try:
            keys = list(client.scan_iter(match=_glob_escape(self.key_prefix) + "*", count=500))
            if keys:
                client.unlink(*keys)
        finally:
            client.close()

    def mcp_posts(self, name: str) -> int:
        """MCP requests a replica served, from its own access log."""
        return self.log(name).read_text().count('"POST /mcp')

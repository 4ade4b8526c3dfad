"""Services some tests need. On a laptop without them those tests skip; in CI (CI set) they fail,
so a green CI always means they ran. Also a private redis-server for tests that stop or pause it.

Every helper here sets `__tracebackhide__`: pytest then reports a skip (`pytest -rs`) at the test
or fixture that asked for the service, not at this file.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import NoReturn

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

# MCPUC_TEST_REDIS_PORT: a Redis on another port, or a closed one to see the tests skip.
REDIS_HOST, REDIS_PORT = "127.0.0.1", int(os.environ.get("MCPUC_TEST_REDIS_PORT", "6379"))
REDIS_URL = f"redis://{REDIS_HOST}:{REDIS_PORT}/0"
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
PROBE_TIMEOUT = 0.5  # seconds; a refused connection answers at once, this bounds a silent one

# How to get each service, appended to the skip reason (README, "Two commands").
HOW_TO_GET = MappingProxyType(
    {
        "redis": "apt install redis-server, and start it on port 6379",
        "nginx": "apt install nginx",
        "chromium": "apt install chromium (playwright comes with `make test`)",
        "postgresql": "apt install postgresql (the tests start their own server from its initdb)",
    }
)


def skip_or_fail_in_ci(reason: str, how_to_get: str = "") -> NoReturn:
    """Skip a test whose service is missing, except in CI (env CI set), where that is a failure."""
    __tracebackhide__ = True
    if os.environ.get("CI"):
        pytest.fail(f"CI requires {reason}")
    pytest.skip(f"{reason} is not available" + (f"; to run this test: {how_to_get}" if how_to_get else ""))


def require_redis() -> None:
    """The shared Redis at 127.0.0.1:6379 must answer PING (never flushed or restarted by tests).

    No retries: redis-py retries a refused connection with backoff by default, which made every
    skipped Redis test cost seconds on a machine without Redis."""
    __tracebackhide__ = True
    client = redis.Redis(
        host=REDIS_HOST,
        port=REDIS_PORT,
        socket_timeout=PROBE_TIMEOUT,
        socket_connect_timeout=PROBE_TIMEOUT,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        client.ping()
    except (redis.RedisError, OSError):
        skip_or_fail_in_ci(f"Redis at {REDIS_HOST}:{REDIS_PORT}", HOW_TO_GET["redis"])
    finally:
        client.close()


def need_redis() -> str:
    __tracebackhide__ = True
    require_redis()
    return REDIS_URL


def need_binary(name: str) -> str:
    __tracebackhide__ = True
    path = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
    if path is None:
        skip_or_fail_in_ci(f"the {name} binary", HOW_TO_GET.get(name, f"install {name}"))
    return path


def delete_prefix(prefix: str) -> None:
    """Delete every key under `prefix` in the shared Redis."""
    client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, socket_timeout=5)
    try:
        keys = list(client.scan_iter(match=glob_escape(prefix) + "*", count=500))
        if keys:
            client.unlink(*keys)
    finally:
        client.close()


def glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class RedisPrefix:
    """A key prefix no other test uses; every key under it is deleted afterwards.

    A class, not @contextlib.contextmanager: a skip raised in contextlib's frame would be reported
    at contextlib.py instead of the test."""

    def __init__(self) -> None:
        self.prefix = f"test-{uuid.uuid4().hex}:"

    def __enter__(self) -> str:
        __tracebackhide__ = True
        require_redis()
        return self.prefix

    def __exit__(self, *exc: object) -> None:
        delete_prefix(self.prefix)


def redis_prefix() -> RedisPrefix:
    """`with redis_prefix() as prefix:` (skips, or fails in CI, without Redis)."""
    return RedisPrefix()


# --- a private redis-server -------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((REDIS_HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """A redis-server of our own on a free port, for tests that stop, pause or reconfigure it."""

    def __init__(self, directory: Path, *args: str) -> None:
        __tracebackhide__ = True
        if not os.access(REDIS_SERVER, os.X_OK):
            skip_or_fail_in_ci(f"redis-server ({REDIS_SERVER})", HOW_TO_GET["redis"])
        self.directory = directory
        self.args = args
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{REDIS_HOST}:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host=REDIS_HOST, port=self.port, socket_timeout=5, retry=Retry(NoBackoff(), 0))

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        log = (self.directory / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                REDIS_HOST,
                "--dir",
                str(self.directory),
                "--save",
                "",
                "--daemonize",
                "no",
                *self.args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 10
        while True:
            client = self.client()
            try:
                if client.ping():
                    return
            except (redis.RedisError, OSError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start; see redis.log") from None
                time.sleep(0.05)
            finally:
                client.close()

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)  # a paused server cannot act on SIGTERM
            process.send_signal(sig)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def redis_server(directory: Path, *args: str) -> RedisServer:
    """`with redis_server(dir) as server:` a started private server, stopped afterwards."""
    __tracebackhide__ = True
    return RedisServer(directory, *args)


# --- a private Sentinel group: a primary, a replica and three sentinels -------------------------

SENTINEL_SERVICE = "mcpuc-test"


class SentinelGroup:
    """A primary, one replica and three sentinels (quorum 2) on free loopback ports.

    `failover()` makes the sentinels promote the replica (`SENTINEL FAILOVER`) and returns once
    every sentinel names the new primary and the old one replicates from it."""

    SENTINELS = 3

    def __init__(self, directory: Path) -> None:
        __tracebackhide__ = True
        self.directory = directory
        self.nodes = [RedisServer(directory / "node-a"), RedisServer(directory / "node-b")]
        self.sentinel_ports = [free_port() for _ in range(self.SENTINELS)]
        self.sentinels: list[subprocess.Popen[bytes]] = []

    def url(self, password: str = "") -> str:
        hosts = ",".join(f"{REDIS_HOST}:{port}" for port in self.sentinel_ports)
        auth = f":{password}@" if password else ""
        return f"redis+sentinel://{auth}{hosts}/{SENTINEL_SERVICE}"

    def sentinel_client(self, index: int = 0) -> redis.Redis:
        return redis.Redis(
            host=REDIS_HOST, port=self.sentinel_ports[index], socket_timeout=5, retry=Retry(NoBackoff(), 0)
        )

    def primary_port(self) -> int:
        client = self.sentinel_client()
        try:
            _, port = client.sentinel_get_master_addr_by_name(SENTINEL_SERVICE)
            return int(port)
        finally:
            client.close()

    def primary(self) -> redis.Redis:
        port = self.primary_port()
        return redis.Redis(host=REDIS_HOST, port=port, socket_timeout=5, retry=Retry(NoBackoff(), 0))

    def start(self) -> None:
        first, second = self.nodes
        first.start()
        second.args = ("--replicaof", REDIS_HOST, str(first.port))
        second.start()
        for index, port in enumerate(self.sentinel_ports):
            conf = self.directory / f"sentinel-{index}.conf"
            conf.write_text(
                f"port {port}\nbind {REDIS_HOST}\ndir {self.directory}\n"
                f"sentinel monitor {SENTINEL_SERVICE} {REDIS_HOST} {first.port} 2\n"
                f"sentinel down-after-milliseconds {SENTINEL_SERVICE} 1000\n"
                f"sentinel failover-timeout {SENTINEL_SERVICE} 5000\n"
            )
            log = (self.directory / f"sentinel-{index}.log").open("ab")
            command = [REDIS_SERVER, str(conf), "--sentinel"]
            self.sentinels.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
            log.close()
        self._wait_until_settled(first.port)

    def _wait_until_settled(self, primary_port: int, timeout: float = 30) -> None:
        """Every sentinel names `primary_port`, knows the other node as a healthy replica and the
        other sentinels; the replica's link to the primary is up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._settled(index, primary_port) for index in range(self.SENTINELS)):
                return
            time.sleep(0.1)
        raise RuntimeError("the sentinel group did not settle; see sentinel-*.log")

    def _settled(self, index: int, primary_port: int) -> bool:
        client = self.sentinel_client(index)
        try:
            _, port = client.sentinel_get_master_addr_by_name(SENTINEL_SERVICE)
            replicas = client.sentinel_slaves(SENTINEL_SERVICE)
            others = client.sentinel_sentinels(SENTINEL_SERVICE)
        except (redis.RedisError, OSError, TypeError):
            return False
        finally:
            client.close()
        if int(port) != primary_port or len(others) < self.SENTINELS - 1:
            return False
        down = {"s_down", "o_down", "disconnected"}
        healthy = [r for r in replicas if r.get("master-link-status") == "ok" and not down & set(r["flags"])]
        return len(healthy) == len(self.nodes) - 1

    def failover(self, timeout: float = 30) -> int:
        """Promote the replica; the new primary's port, once every sentinel names it. (A sentinel
        refuses with NOGOODSLAVE until its periodic INFO has seen the replica healthy again after
        the previous failover: asked again until then.)"""
        old = self.primary_port()
        new = next(node.port for node in self.nodes if node.port != old)
        deadline = time.monotonic() + timeout
        while True:
            client = self.sentinel_client()
            try:
                client.execute_command("SENTINEL", "FAILOVER", SENTINEL_SERVICE)
                break
            except redis.ResponseError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
            finally:
                client.close()
        while time.monotonic() < deadline:
            if all(self._names(index) == new for index in range(self.SENTINELS)):
                return new
            time.sleep(0.05)
        raise RuntimeError("the failover did not finish; see sentinel-*.log")

    def wait_promoted(self, old_port: int, timeout: float = 20) -> int:
        """Until the sentinels name a primary other than `old_port` (after it died); its port."""
        deadline = time.monotonic() + timeout
        while (port := self._names(0)) in (old_port, None):
            if time.monotonic() > deadline:
                raise RuntimeError("no replica was promoted; see sentinel-*.log")
            time.sleep(0.1)
        assert port is not None
        return port

    def restart_stopped_as_replicas(self) -> None:
        """Start the stopped nodes again as replicas of the current primary, as an operator
        brings a failed primary back, and wait until they replicate."""
        primary = self.primary_port()
        for node in self.nodes:
            if node.process is None:
                node.args = ("--replicaof", REDIS_HOST, str(primary))
                node.start()
        self.wait_replicated()

    def wait_replicated(self, timeout: float = 30) -> None:
        """Until the demoted primary replicates from the new one (Sentinel reconfigures it on its
        next periodic check, about 10 s after the promotion)."""
        primary = self.primary_port()
        deadline = time.monotonic() + timeout
        while not all(self._replicates(n.port, primary) for n in self.nodes if n.port != primary):
            if time.monotonic() > deadline:
                raise RuntimeError("the old primary did not become a replica; see sentinel-*.log")
            time.sleep(0.1)

    def _names(self, index: int) -> int | None:
        client = self.sentinel_client(index)
        try:
            _, port = client.sentinel_get_master_addr_by_name(SENTINEL_SERVICE)
            return int(port)
        except (redis.RedisError, OSError, TypeError):
            return None
        finally:
            client.close()

    @staticmethod
    def _replicates(port: int, primary_port: int) -> bool:
        client = redis.Redis(host=REDIS_HOST, port=port, socket_timeout=5, retry=Retry(NoBackoff(), 0))
        try:
            info = client.info("replication")
        except (redis.RedisError, OSError):
            return False
        finally:
            client.close()
        return info.get("master_port") == primary_port and info.get("master_link_status") == "up"

    def stop(self) -> None:
        for process in self.sentinels:
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.sentinels = []
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> SentinelGroup:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


# --- a private Redis Cluster: three primaries ----------------------------------------------------

REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
CLUSTER_BUS_OFFSET = 10000  # Redis Cluster's bus listens on port + 10000


def free_cluster_port() -> int:
    """A free loopback port whose cluster bus port (+10000) is free too."""
    for _ in range(200):
        port = free_port()
        if port + CLUSTER_BUS_OFFSET > 65535:
            continue
        with socket.socket() as sock:
            try:
                sock.bind((REDIS_HOST, port + CLUSTER_BUS_OFFSET))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


class ClusterGroup:
    """Three cluster-enabled primaries on loopback, joined with `redis-cli --cluster create`."""

    def __init__(self, directory: Path, primaries: int = 3) -> None:
        __tracebackhide__ = True
        if not os.access(REDIS_CLI, os.X_OK):
            skip_or_fail_in_ci(f"redis-cli ({REDIS_CLI})", HOW_TO_GET["redis"])
        self.nodes = [RedisServer(directory / f"node-{index}") for index in range(primaries)]
        for node in self.nodes:
            node.port = free_cluster_port()
            node.args = (
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            )

    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{REDIS_HOST}:{node.port}" for node in self.nodes)

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host=REDIS_HOST, port=self.nodes[0].port, socket_timeout=5)

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        addresses = [f"{REDIS_HOST}:{node.port}" for node in self.nodes]
        subprocess.run(
            [REDIS_CLI, "--cluster", "create", *addresses, "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.wait_ok()

    def wait_ok(self, timeout: float = 30) -> None:
        """Until every node reports cluster_state:ok."""
        deadline = time.monotonic() + timeout
        while not all(self._ok(node) for node in self.nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not reach cluster_state:ok; see redis.log")
            time.sleep(0.1)

    @staticmethod
    def _ok(node: RedisServer) -> bool:
        client = node.client()
        try:
            return b"cluster_state:ok" in client.execute_command("CLUSTER", "INFO")
        except (redis.RedisError, OSError):
            return False
        finally:
            client.close()

    def node_for(self, key: str) -> RedisServer:
        """The primary that owns `key`'s hash slot."""
        client = self.nodes[0].client()
        try:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    port = int(primary[1])
                    return next(node for node in self.nodes if node.port == port)
        finally:
            client.close()
        raise RuntimeError(f"no primary owns slot {slot}")

    def restart(self, node: RedisServer, sig: signal.Signals = signal.SIGTERM) -> None:
        node.stop(sig)
        node.start()
        self.wait_ok()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> ClusterGroup:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

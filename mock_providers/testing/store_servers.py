"""Store servers of our own on loopback, for the tests, the drill and the benchmarks: a
redis-server, a Redis Sentinel group (a primary, a replica, three sentinels), a three-primary Redis
Cluster and a PostgreSQL server (`initdb` in a temp dir). Nothing here touches a server already
running on the machine. A missing binary raises `MissingService` (tests/needs.py turns it into a
skip, or a failure in CI).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from mock_providers.testing.servers import HOST as REDIS_HOST
from mock_providers.testing.servers import free_port

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def _ask(client: redis.Redis, *command: str) -> Any:
    return client.execute_command(*command)  # type: ignore[no-untyped-call]


def _sentinel(client: redis.Redis) -> Any:
    """redis-py's typed sentinel commands, whose replies its stubs type loosely."""
    return client


class MissingService(RuntimeError):
    """A binary a server needs is not installed; `what` names it."""

    def __init__(self, what: str, service: str) -> None:
        super().__init__(f"{what} is not available")
        self.what = what
        self.service = service  # a key of tests/needs.py HOW_TO_GET


class RedisServer:
    """A redis-server of our own on a free port, for tests that stop, pause or reconfigure it."""

    def __init__(self, directory: Path, *args: str) -> None:
        if not os.access(REDIS_SERVER, os.X_OK):
            raise MissingService(f"redis-server ({REDIS_SERVER})", "redis")
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
        self.process = subprocess.Popen(  # noqa: S603 - our own binaries, no shell
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


class _Group:
    """Servers started together: `with Group(...) as group:` stops every one it started, also
    when starting one of them fails."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
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


# --- a private Sentinel group: a primary, a replica and three sentinels -------------------------

SENTINEL_SERVICE = "mcpuc-test"


class SentinelGroup(_Group):
    """A primary, one replica and three sentinels (quorum 2) on free loopback ports.

    `failover()` makes the sentinels promote the replica (`SENTINEL FAILOVER`) and returns once
    every sentinel names the new primary and the old one replicates from it."""

    SENTINELS = 3

    def __init__(self, directory: Path) -> None:
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
            _, port = _sentinel(client).sentinel_get_master_addr_by_name(SENTINEL_SERVICE)
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
            self.sentinels.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))  # noqa: S603 - our own binaries, no shell
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
            _, port = _sentinel(client).sentinel_get_master_addr_by_name(SENTINEL_SERVICE)
            replicas = _sentinel(client).sentinel_slaves(SENTINEL_SERVICE)
            others = _sentinel(client).sentinel_sentinels(SENTINEL_SERVICE)
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
                _ask(client, "SENTINEL", "FAILOVER", SENTINEL_SERVICE)
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
            _, port = _sentinel(client).sentinel_get_master_addr_by_name(SENTINEL_SERVICE)
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


class ClusterGroup(_Group):
    """Three cluster-enabled primaries on loopback, joined with `redis-cli --cluster create`."""

    def __init__(self, directory: Path, primaries: int = 3) -> None:
        if not os.access(REDIS_CLI, os.X_OK):
            raise MissingService(f"redis-cli ({REDIS_CLI})", "redis")
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
        subprocess.run(  # noqa: S603 - our own binaries, no shell
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
            return b"cluster_state:ok" in _ask(client, "CLUSTER", "INFO")
        except (redis.RedisError, OSError):
            return False
        finally:
            client.close()

    def node_for(self, key: str) -> RedisServer:
        """The primary that owns `key`'s hash slot."""
        client = self.nodes[0].client()
        try:
            slot = int(_ask(client, "CLUSTER", "KEYSLOT", key))
            for start, end, primary, *_ in _ask(client, "CLUSTER", "SLOTS"):
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


# --- PostgreSQL ---------------------------------------------------------------------------------

PG_HOST = REDIS_HOST  # loopback only
SUPERUSER = "mcpuc_admin"
START_SECONDS = 30.0


def postgres_bin_dir() -> Path | None:
    """The newest /usr/lib/postgresql/<ver>/bin with an initdb (Debian's layout), else PATH's."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PostgresServer:
    """`with PostgresServer() as pg:` a started server; `pg.url(database)` to reach it."""

    def __init__(self) -> None:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            raise MissingService("PostgreSQL (initdb)", "postgresql")
        self.bin_dir = bin_dir
        self.port = free_port()
        # Not under pytest's tmp dirs: those are 0700 root-owned, which `nobody` cannot enter.
        self.root = Path(tempfile.mkdtemp(prefix="mcpuc-pg-"))
        self.data = self.root / "data"
        self.password = "admin-" + os.urandom(8).hex()
        self.process: subprocess.Popen[bytes] | None = None

    def _as_owner(self, *command: str) -> list[str]:
        if os.geteuid() != 0:
            return list(command)
        return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command]

    def url(self, database: str = "postgres", user: str = SUPERUSER, password: str | None = None) -> str:
        secret = self.password if password is None else password
        return f"postgresql://{quote(user)}:{quote(secret)}@{PG_HOST}:{self.port}/{quote(database)}"

    def start(self) -> PostgresServer:
        """Start the server (again, on the same port and data, after `stop(keep_data=True)`)."""
        if not self.data.exists():
            self._initdb()
        self._run_server()
        return self

    def _initdb(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.root, "nobody", "nogroup")
        pwfile = self.root / "pw"
        pwfile.write_text(self.password)
        if os.geteuid() == 0:
            shutil.chown(pwfile, "nobody", "nogroup")
        subprocess.run(  # noqa: S603 - our own binaries, no shell
            self._as_owner(
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                SUPERUSER,
                "--pwfile",
                str(pwfile),
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--no-sync",
            ),
            check=True,
            capture_output=True,
        )
        pwfile.unlink()

    def _run_server(self) -> None:
        log = (self.root / "postgres.log").open("ab")
        self.process = subprocess.Popen(  # noqa: S603 - our own binaries, no shell
            self._as_owner(
                str(self.bin_dir / "postgres"),
                "-D",
                str(self.data),
                "-p",
                str(self.port),
                "-c",
                f"listen_addresses={PG_HOST}",
                "-c",
                f"unix_socket_directories={self.root}",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=200",
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + START_SECONDS
        while not self._accepts():
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"postgres did not start: {tail}")
            time.sleep(0.05)

    def _accepts(self) -> bool:
        result = subprocess.run(  # noqa: S603 - our own binaries, no shell
            [str(self.bin_dir / "pg_isready"), "-h", PG_HOST, "-p", str(self.port), "-t", "1"],
            capture_output=True,
        )
        return result.returncode == 0

    def log_tail(self) -> str:
        path = self.root / "postgres.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run `sql` as the superuser; its output (unaligned, tuples only)."""
        result = subprocess.run(  # noqa: S603 - our own binaries, no shell
            [
                str(self.bin_dir / "psql"),
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
                self.url(database),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return result.stdout

    def stop(self, *, keep_data: bool = False) -> None:
        """Stop the server (a fast shutdown); its files go too unless `keep_data`."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # fast shutdown
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if not keep_data:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

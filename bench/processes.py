"""Server processes for the benchmarks, and their CPU time read from /proc.

`mcp-url-connect mock-providers` (dev AS + MockHub) in one process and the MCP server in another
(`serve`, or `bench.server` with the benchmark's extra tools), or the one-process `demo`; all on
loopback ports, under a temporary directory, stopped (and their Redis keys deleted) on exit.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import redis

from mock_providers.testing.cluster import wait_for
from mock_providers.testing.replicas import REDIS_URL
from mock_providers.testing.servers import HOST, free_port

CLI = [sys.executable, "-m", "service.ops.cli"]
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid`, all its threads (dead ones included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14 and 15


def cpu_nanoseconds(pid: int) -> int:
    """CPU time of process `pid`'s live threads in nanoseconds (/proc/<pid>/task/*/schedstat, the
    scheduler's own count): a single call's worth, where `cpu_seconds` moves in 10 ms ticks."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            total += int((task / "schedstat").read_text().split()[0])
    return total


def redis_available() -> bool:
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=1, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def delete_prefix(prefix: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            client.delete(key)
    finally:
        client.close()


@dataclass
class Stack:
    """An MCP server process and the mock providers (in the same process for `demo`).

    `server`: "demo", "serve" (the CLI commands) or "bench" (bench/server.py: `serve` plus the
    benchmark's tools, and bare SDK servers with the same bearer verifier on `sdk_port` and, with
    our SSE resumption, on `sdk_resumable_port`).
    `store`: "sqlite" or "redis".
    `request_cpu`: bench/server.py measures its CPU per request (bench/request_cpu.py); that costs
    the server some CPU of its own, which the SDK servers do not pay.
    `baseline`: another checkout of this repository; its bench/server.py runs beside ours on
    `baseline_port` (process "baseline"), for an A/B of two versions of the code.
    `tree`: another checkout of this repository to run the `demo` from (its code, our venv)."""

    root: Path
    server: str = "serve"
    store: str = "sqlite"
    log_level: str = "INFO"
    port: int = field(default_factory=free_port)
    providers_port: int = field(default_factory=free_port)
    sdk_port: int = field(default_factory=free_port)
    sdk_resumable_port: int = field(default_factory=free_port)
    prefix: str = field(default_factory=lambda: f"bench-{uuid.uuid4().hex[:12]}:")
    profile: Path | None = None  # cProfile output of the MCP server process, written when it stops
    settings: dict[str, str] = field(default_factory=dict)  # more MCPUC_* variables for `serve`
    request_cpu: bool = False
    baseline: Path | None = None
    baseline_port: int = field(default_factory=free_port)
    tree: Path | None = None
    start_seconds: float = 60.0  # a loaded machine takes a while to import everything
    pids: dict[str, int] = field(default_factory=dict)
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def mcp_url(self) -> str:
        return f"http://{HOST}:{self.port}/mcp"

    @property
    def sdk_url(self) -> str:
        return f"http://{HOST}:{self.sdk_port}/mcp"

    @property
    def sdk_resumable_url(self) -> str:
        return f"http://{HOST}:{self.sdk_resumable_port}/mcp"

    def _spawn(
        self, name: str, args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            # Our own commands with fixed arguments.
            process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)  # noqa: S603
        self._processes.append(process)
        self.pids[name] = process.pid
        return process

    def start(self) -> Stack:
        """Every process running and answering; on failure, none left running."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _wait_for(self, url: str, process: subprocess.Popen[bytes], name: str) -> None:
        wait_for(url, process, self.root / f"{name}.log", self.start_seconds)

    def _start(self) -> Stack:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.server == "demo":
            demo = self._spawn(
                "demo",
                [
                    *CLI,
                    "demo",
                    *("--host", HOST, "--port", str(self.port)),
                    *("--providers-port", str(self.providers_port)),
                    *("--metrics-port", str(free_port())),
                    *("--data-dir", str(self.data_dir), "--log-level", self.log_level),
                ],
                cwd=self.tree,
            )
            self.pids["server"] = demo.pid
            self._wait_for(f"http://{HOST}:{self.port}/readyz", demo, "demo")
            self._wait_for(
                f"http://{HOST}:{self.providers_port}/.well-known/openid-configuration", demo, "demo"
            )
            return self
        providers = self._spawn(
            "providers",
            [
                *CLI,
                "mock-providers",
                *("--host", HOST, "--port", str(self.providers_port)),
                *("--mcp-public-url", f"http://{HOST}:{self.port}", "--data-dir", str(self.data_dir)),
                *("--log-level", self.log_level),
            ],
        )
        self._wait_for(
            f"http://{HOST}:{self.providers_port}/.well-known/openid-configuration", providers, "providers"
        )
        env = dict(line.split("=", 1) for line in (self.data_dir / "serve.env").read_text().splitlines())
        env = {
            **os.environ,
            **env,
            "MCPUC_HOST": HOST,
            "MCPUC_PORT": str(self.port),
            "MCPUC_METRICS_PORT": str(free_port()),  # not 9464: runs may overlap on one machine
            "MCPUC_DATA_DIR": str(self.root / "server-data"),
            "MCPUC_LOG_LEVEL": self.log_level,
            **self.settings,
        }
        if self.store == "redis":
            env |= {"MCPUC_STORE_URL": REDIS_URL, "MCPUC_REDIS_PREFIX": self.prefix}
        ours = ["-m", "bench.server", "ours", *(["--request-cpu"] if self.request_cpu else [])]
        command = ours if self.server == "bench" else ["-m", "service.ops.cli", "serve"]
        profiler = ["-m", "bench.cpu_profile", str(self.profile)] if self.profile else []
        server = self._spawn("server", [sys.executable, *profiler, *command], env)
        if self.server == "bench":  # started side by side: they import the same modules
            for kind, port in (("sdk", self.sdk_port), ("sdk-resumable", self.sdk_resumable_port)):
                sdk_env = env | {"MCPUC_PORT": str(port)}
                sdk = self._spawn(kind, [sys.executable, "-m", "bench.server", kind], sdk_env)
                self._wait_for(f"http://{HOST}:{port}/healthz", sdk, kind)
        if self.baseline is not None:
            base_env = env | {
                "MCPUC_PORT": str(self.baseline_port),
                "MCPUC_DATA_DIR": str(self.root / "baseline-data"),
            }
            base = self._spawn("baseline", [sys.executable, *ours], base_env, cwd=self.baseline)
            self._wait_for(f"http://{HOST}:{self.baseline_port}/readyz", base, "baseline")
        self._wait_for(f"http://{HOST}:{self.port}/readyz", server, "server")
        return self

    def cpu(self, name: str = "server") -> float:
        return cpu_seconds(self.pids[name])

    def cpu_ns(self, name: str = "server") -> int:
        return cpu_nanoseconds(self.pids[name])

    def stop(self) -> None:
        for process in reversed(self._processes):
            process.terminate()
        for process in self._processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        if self.store == "redis":
            delete_prefix(self.prefix)

"""Services some tests need. On a laptop without them those tests skip; in CI (CI set) they fail,
so a green CI always means they ran. Also a private redis-server for tests that stop or pause it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
REDIS_URL = f"redis://{REDIS_HOST}:{REDIS_PORT}/0"
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def skip_or_fail_in_ci(reason: str) -> NoReturn:
    """Skip a test whose service is missing, except in CI (env CI set), where that is a failure."""
    if os.environ.get("CI"):
        pytest.fail(f"CI requires {reason}")
    pytest.skip(f"{reason} is not available")


def require_redis() -> None:
    """The shared Redis at 127.0.0.1:6379 must answer PING (never flushed or restarted by tests)."""
    client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, socket_timeout=1, socket_connect_timeout=1)
    try:
        client.ping()
    except (redis.RedisError, OSError):
        skip_or_fail_in_ci(f"Redis at {REDIS_HOST}:{REDIS_PORT}")
    finally:
        client.close()


def need_redis() -> str:
    require_redis()
    return REDIS_URL


def need_binary(name: str) -> str:
    path = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
    if path is None:
        skip_or_fail_in_ci(f"the {name} binary")
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


@contextlib.contextmanager
def redis_prefix() -> Iterator[str]:
    """A key prefix no other test uses; every key under it is deleted afterwards."""
    require_redis()
    prefix = f"test-{uuid.uuid4().hex}:"
    try:
        yield prefix
    finally:
        delete_prefix(prefix)


# --- a private redis-server -------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((REDIS_HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """A redis-server of our own on a free port, for tests that stop, pause or reconfigure it."""

    def __init__(self, directory: Path, *args: str) -> None:
        if not os.access(REDIS_SERVER, os.X_OK):
            skip_or_fail_in_ci(f"redis-server ({REDIS_SERVER})")
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


@contextlib.contextmanager
def redis_server(directory: Path, *args: str) -> Iterator[RedisServer]:
    server = RedisServer(directory, *args)
    server.start()
    try:
        yield server
    finally:
        server.stop()

"""Services some tests need. On a laptop without them those tests skip; in CI (CI set) they fail,
so a green CI always means they ran. Also a private redis-server for tests that stop or pause it.

Every helper here sets `__tracebackhide__`: pytest then reports a skip (`pytest -rs`) at the test
or fixture that asked for the service, not at this file.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from types import MappingProxyType
from typing import NoReturn

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from mock_providers.testing import store_servers
from mock_providers.testing.servers import free_port  # noqa: F401 - for the tests
from mock_providers.testing.store_servers import SENTINEL_SERVICE  # noqa: F401 - for the tests

# MCPUC_TEST_REDIS_PORT: a Redis on another port, or a closed one to see the tests skip.
REDIS_HOST, REDIS_PORT = "127.0.0.1", int(os.environ.get("MCPUC_TEST_REDIS_PORT", "6379"))
REDIS_URL = f"redis://{REDIS_HOST}:{REDIS_PORT}/0"
REDIS_SERVER = store_servers.REDIS_SERVER
PROBE_TIMEOUT = 0.5  # seconds; a refused connection answers at once, this bounds a silent one

# How to get each service, appended to the skip reason (README, "Two commands").
HOW_TO_GET = MappingProxyType(
    {
        "redis": "apt install redis-server, and start it on port 6379",
        "nginx": "apt install nginx",
        "envsubst": "apt install gettext-base (renders the router's nginx template)",
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


class RedisServer(store_servers.RedisServer):
    """A redis-server of our own on a free port, for tests that stop, pause or reconfigure it
    (mock_providers/testing/store_servers.py); skips, or fails in CI, without redis-server."""

    def __init__(self, directory: Path, *args: str) -> None:
        __tracebackhide__ = True
        try:
            super().__init__(directory, *args)
        except store_servers.MissingService as exc:
            skip_or_fail_in_ci(exc.what, HOW_TO_GET[exc.service])


class SentinelGroup(store_servers.SentinelGroup):
    """store_servers.SentinelGroup; skips, or fails in CI, without redis-server."""

    def __init__(self, directory: Path) -> None:
        __tracebackhide__ = True
        try:
            super().__init__(directory)
        except store_servers.MissingService as exc:
            skip_or_fail_in_ci(exc.what, HOW_TO_GET[exc.service])


class ClusterGroup(store_servers.ClusterGroup):
    """store_servers.ClusterGroup; skips, or fails in CI, without redis-server or redis-cli."""

    def __init__(self, directory: Path, primaries: int = 3) -> None:
        __tracebackhide__ = True
        try:
            super().__init__(directory, primaries)
        except store_servers.MissingService as exc:
            skip_or_fail_in_ci(exc.what, HOW_TO_GET[exc.service])


def redis_server(directory: Path, *args: str) -> RedisServer:
    """`with redis_server(dir) as server:` a started private server, stopped afterwards."""
    __tracebackhide__ = True
    return RedisServer(directory, *args)

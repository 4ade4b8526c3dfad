"""Leakage: a canary scan over everything a full flow produces (every response and notification,
every log line at DEBUG including httpx, authlib and redis, and the raw store: the SQLite file and
its WAL, or every Redis key's DUMP and value) finds no token, code, state, verifier, client secret,
bearer or cookie, in plain, base64 or URL-encoded form (DESIGN invariant 6; RFC 6819 §5.1.4.1;
client-elicitation.mdx "URL Mode Elicitation for OAuth Flows": tokens never reach the client)."""

from __future__ import annotations

import base64
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import mcp_types
import pytest
from starlette.testclient import TestClient

from mock_providers.demo import build_demo
from mock_providers.testing.browser import Browser
from mock_providers.testing.client import MODES
from mock_providers.testing.servers import HOST
from service.app import create_app
from service.ops.cli import main
from service.settings import DEFAULT_METRICS_PORT, load_settings
from tests.needs import delete_prefix, need_redis
from tests.security.attack import (
    Attack,
    Canaries,
    Servers,
    attack,
    captured_logs,
    find_leaks,
    gather_canaries,
    raw_store,
    running,
    unique,
)
from tests.security.flows import (
    connect_fully,
    elicit,
    retry,
    sign_in_to_connections,
    until_callback,
    with_query,
)
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.security

KINDS = ("provider token", "code", "state", "verifier", "secret", "bearer", "cookie")


def test_canary_scan_finds_every_encoding() -> None:
    """Harness self-test: the scan finds a secret plain, URL-encoded and base64 at every alignment."""
    secret = "mhat_" + "Zq9-_x" * 7
    canaries = Canaries()
    canaries.add("provider token", secret)
    forms = canaries.forms()
    hidden = [
        f"... {secret} ...",
        "q=" + quote(secret, safe=""),
        *(base64.b64encode(b"p" * k + secret.encode() + b"s").decode() for k in range(3)),
        *(base64.urlsafe_b64encode(b"\xff" * k + secret.encode()).decode() for k in range(3)),
    ]
    for text in hidden:
        assert find_leaks(text, forms, "test"), text
    assert not find_leaks("nothing to see " * 20, forms, "test")


async def full_flow(a: Attack, servers: Servers, browser: Browser, mode: str, user: str) -> None:
    """Real dev-AS login, connect, the tool's result, list, a second API call, a reload of the
    callback (the first outcome again) and a replay with another code (refused)."""
    await sign_in_to_connections(browser, servers, user)
    async with elicit(servers, user, mode) as e:
        callback = await until_callback(browser, servers, e.url, user, login=user + "-gh")
        a.status(await browser.get(callback), 200)
        a.status(await browser.get(callback), 200)  # a reload: the first outcome, no second exchange
        a.status(await browser.get(with_query(callback, code=secrets.token_urlsafe(32))), 400)
        result = await retry(e)
        a.check(
            isinstance(result, mcp_types.CallToolResult) and not result.is_error, f"the tool ran: {result}"
        )
        listed = await e.client.session.call_tool("list_connections", {})
        again = await e.client.session.call_tool("whoami", {})  # a provider API call with the stored token
        a.observe(result.model_dump(), listed.model_dump(), again.model_dump())
        a.observe([n.model_dump() for n in e.recorder.notifications])


@pytest.mark.parametrize("mode", MODES)
async def test_full_flow_on_sqlite_leaks_nothing(servers: Servers, browser: Browser, mode: str) -> None:
    """Leak scan of a whole flow on SQLite: responses, logs, store + WAL (RFC 6819 §5.1.4.1)."""
    completions = 1 if mode == "legacy" else 0
    async with attack(
        servers,
        browsers=[browser],
        new_connections=1,
        token_requests=1,
        exchanges_ok=1,
        completions=completions,
        settle=0.2,
    ) as a:
        await full_flow(a, servers, browser, mode, unique("alice"))
    canaries = gather_canaries(servers, [browser], [])
    missing = [kind for kind in KINDS if not canaries.by_kind.get(kind)]
    assert not missing, f"the scan had no canary of kind {missing}: it would prove nothing"
    assert {name for name, _ in raw_store(servers)} >= {"store.sqlite3", "store.sqlite3-wal"}


async def test_attack_harness_flags_a_flow_that_connects(servers: Servers, browser: Browser) -> None:
    """Harness self-test: a flow that stores a token inside attack() fails its default checks."""
    alice = unique("alice")
    async with elicit(servers, alice, "legacy") as e:
        with pytest.raises(AssertionError, match="connections written"):
            async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
                a.status(await connect_fully(browser, servers, e.url, alice), 200)
        with pytest.raises(AssertionError, match="must state its expected"):
            async with attack(servers):
                pass


async def test_logs_are_captured_at_debug_from_every_library(servers: Servers, browser: Browser) -> None:
    """Harness self-test: the log capture sees uvicorn, httpx and authlib DEBUG records."""
    with captured_logs() as logs:
        await sign_in_to_connections(browser, servers, unique("alice"))
    names = {name.split(".")[0] for _, name, _ in logs.records}
    assert {"uvicorn", "httpx", "authlib"} <= names, names
    assert any("/login/callback" in line for line in logs.lines)


@pytest.fixture(scope="module")
def redis_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """The demo on the shared Redis, under a prefix no one else uses (deleted afterwards)."""
    url = need_redis()
    prefix = f"test-security-{uuid.uuid4().hex}:"
    try:
        yield from running(tmp_path_factory, "redis-leakage", store_url=url, redis_prefix=prefix)
    finally:
        delete_prefix(prefix)


@pytest.mark.parametrize("mode", MODES)
async def test_full_flow_on_redis_leaks_nothing(redis_servers: Servers, browser: Browser, mode: str) -> None:
    """Leak scan of a whole flow on Redis: every key name, DUMP and value (RFC 6819 §5.1.4.1)."""
    completions = 1 if mode == "legacy" else 0
    async with attack(
        redis_servers,
        browsers=[browser],
        new_connections=1,
        token_requests=1,
        exchanges_ok=1,
        completions=completions,
        settle=0.2,
    ) as a:
        await full_flow(a, redis_servers, browser, mode, unique("alice"))
    names = [name for name, _ in raw_store(redis_servers)]
    assert any(name.startswith("DUMP") and ":conn:" in name for name in names), names


PLAIN_REDIS_ELSEWHERE = "redis://:hunter2-redis-password@10.20.30.40:6379/0"


def test_serve_refuses_plain_redis_to_another_host(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`serve` with a plain `redis://` store on another host exits 2 before anything starts, naming
    the setting that allows it and never the URL (its password); `rediss://` is accepted
    (RFC 6819 §5.1.1; as plain http outside loopback, `require_tls_to_redis_unless_loopback`)."""
    key = base64.urlsafe_b64encode(b"K" * 32).decode().rstrip("=")
    environ = {
        "MCPUC_PUBLIC_URL": "https://mcp.example.com",
        "MCPUC_AUTH_ISSUER": "https://as.example.com",
        "MCPUC_LOGIN_CLIENT_ID": "mcp-login",
        "MCPUC_SESSION_SECRET": "s" * 40,
        "MCPUC_ENCRYPTION_KEYS": f"k1:{key}",
        "MCPUC_REQUEST_STATE_KEYS": key,
        "MCPUC_STORE_URL": PLAIN_REDIS_ELSEWHERE,
    }
    monkeypatch.delenv("MCPUC_CONFIG_FILE", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "MCPUC_ALLOW_PLAINTEXT_REDIS" in err and "rediss://" in err, err
    assert "hunter2" not in err and "10.20.30.40" not in err
    # Accepted: TLS to the same host, or the operator's explicit word for a network they trust.
    assert load_settings(
        {**environ, "MCPUC_STORE_URL": "rediss://10.20.30.40:6380/0"}
    ).require_safe_to_serve()
    assert load_settings({**environ, "MCPUC_ALLOW_PLAINTEXT_REDIS": "true"}).require_safe_to_serve()


async def test_the_public_port_does_not_serve_metrics_by_default(servers: Servers, tmp_path: Path) -> None:
    """GET /metrics on the public port: 404, by default (its own port, MCPUC_METRICS_PORT); the
    metrics port answers. Metrics name tools, outcomes and volumes: operators' data, not the
    public's."""
    default = build_demo(HOST, 8000, 8001, tmp_path).settings  # metrics_port as shipped
    assert default.metrics_port == DEFAULT_METRICS_PORT != default.port
    with TestClient(create_app(default), base_url=default.public_url) as public:
        assert public.get("/metrics").status_code == 404
        assert public.get("/healthz").status_code == 200  # the port itself serves
    async with httpx.AsyncClient() as http, attack(servers) as a:
        a.status(await http.get(f"{servers.public_url}/metrics"), 404)
        scraped = a.status(await http.get(servers.metrics_url), 200)
        a.check("mcpuc_" in scraped.text, "the metrics port serves the metrics")


@pytest.fixture(scope="module")
def postgres_servers(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer
) -> Iterator[Servers]:
    """The demo on a database of its own on the private PostgreSQL server (store and bus)."""
    database = f"leakage_{uuid.uuid4().hex[:12]}"
    postgres_server.psql(f"CREATE DATABASE {database}")
    yield from running(tmp_path_factory, "postgres-leakage", store_url=postgres_server.url(database))


@pytest.mark.parametrize("mode", MODES)
async def test_full_flow_on_postgres_leaks_nothing(
    postgres_servers: Servers, browser: Browser, mode: str
) -> None:
    """Leak scan of a whole flow on PostgreSQL: every row as text, every blob's bytes, and every
    completion notice (RFC 6819 §5.1.4.1)."""
    completions = 1 if mode == "legacy" else 0
    async with attack(
        postgres_servers,
        browsers=[browser],
        new_connections=1,
        token_requests=1,
        exchanges_ok=1,
        completions=completions,
        settle=0.2,
    ) as a:
        await full_flow(a, postgres_servers, browser, mode, unique("alice"))
    names = [name for name, _ in raw_store(postgres_servers)]
    assert "blob of connections" in names, names

"""Plain-text Redis only to this machine, checked where the client really connects
(token_store/backends/redis/plaintext.py): a loopback sentinel handing out a primary elsewhere, a
URL whose query names a host elsewhere, a cluster announcing nodes elsewhere, and `store
copy-from`'s source URL. Each is refused before a byte of the protocol (AUTH and its password
included) reaches the server, and with MCPUC_ALLOW_PLAINTEXT_REDIS the same URL works.

Tests stay on loopback: 127.0.0.2 plays another machine. Real servers listen there, and the rule
is told that this one address is not this machine (`elsewhere`), the one thing a test on one
machine cannot have for real."""

from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from service.ops.cli import main
from tests.needs import (
    REDIS_HOST,
    REDIS_SERVER,
    ClusterGroup,
    RedisServer,
    free_port,
    redis_prefix,
    redis_server,
)
from tests.support.store_contract import ALICE, REDIS_URL, make_connection
from token_store import KeyRing, RedisStore, StoreUnavailable, UserRef
from token_store.backends.redis import plaintext

ELSEWHERE = "127.0.0.2"
SERVICE = "mcpuc-elsewhere"


@pytest.fixture
def elsewhere(monkeypatch: pytest.MonkeyPatch) -> str:
    """127.0.0.2, which the rule now takes for another machine."""
    real = plaintext.is_loopback
    monkeypatch.setattr(plaintext, "is_loopback", lambda host: real(host) and host != ELSEWHERE)
    return ELSEWHERE


def on_both(directory: Path) -> RedisServer:
    """A private redis-server listening on 127.0.0.1 and on the address standing for elsewhere."""
    return redis_server(directory, "--bind", f"{REDIS_HOST} {ELSEWHERE}")


@contextmanager
def counting(server: RedisServer) -> Iterator[Callable[[], int]]:
    """How many commands `server` has run so far, read over one connection of the test's own
    (each reading adds its own INFO)."""
    client = server.client()
    try:
        yield lambda: int(client.info("stats")["total_commands_processed"])
    finally:
        client.close()


@contextmanager
def sentinel_naming(directory: Path, host: str, port: int) -> Iterator[str]:
    """A sentinel on 127.0.0.1 that monitors the primary at host:port; its redis+sentinel URL."""
    sentinel_port = free_port()
    conf = directory / "sentinel.conf"
    conf.write_text(f"port {sentinel_port}\nbind {REDIS_HOST}\ndir {directory}\n")
    with conf.open("a") as appended:
        appended.write(f"sentinel monitor {SERVICE} {host} {port} 1\n")
    log = (directory / "sentinel.log").open("ab")
    process = subprocess.Popen([REDIS_SERVER, str(conf), "--sentinel"], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    client = redis.Redis(host=REDIS_HOST, port=sentinel_port, socket_timeout=5)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                if client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE):
                    break
            except (redis.RedisError, OSError):
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)  # the sentinel is starting: polled, as tests/support/settle.py does
        yield f"redis+sentinel://{REDIS_HOST}:{sentinel_port}/{SERVICE}"
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=10)


async def works(store: RedisStore) -> bool:
    await store.put_connection(make_connection())
    return await store.get_connection(ALICE, "github") is not None


async def test_a_sentinel_on_loopback_handing_out_a_primary_elsewhere_is_refused_before_any_command(
    tmp_path: Path, keyring: KeyRing, elsewhere: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The URL names only a loopback sentinel, which the settings accept; the primary it hands
    out is elsewhere. The connection to it is refused once its socket is open: the primary runs
    no command of ours (no HELLO, AUTH or PING), and the log names the address refused. The
    operator's word for a trusted network makes the same URL work, and a store on loopback serves
    its users meanwhile."""
    with (
        on_both(tmp_path / "primary") as primary,
        sentinel_naming(tmp_path, elsewhere, primary.port) as url,
        counting(primary) as processed,
        redis_prefix() as prefix,
    ):
        before = processed()
        with pytest.raises(StoreUnavailable, match="PlaintextToRemoteRedis"):
            await RedisStore.open(url, keyring, prefix=prefix)
        assert processed() == before + 1  # our own INFO only
        assert f"refused a plain-text connection to {elsewhere}" in caplog.text
        trusted = await RedisStore.open(url, keyring, prefix=prefix, allow_plaintext=True)
        local = await RedisStore.open(REDIS_URL, keyring, prefix=prefix)
        try:
            assert await works(trusted) and await works(local)
        finally:
            await trusted.close()
            await local.close()


async def test_a_query_host_elsewhere_is_refused_when_the_client_connects(
    tmp_path: Path, keyring: KeyRing, elsewhere: str
) -> None:
    """`redis:///0?host=H`: no host in the URL's authority, so the host the client connects to
    is the query's. Refused there, with no command run; the same server named on loopback works."""
    with on_both(tmp_path / "server") as server, counting(server) as processed, redis_prefix() as prefix:
        before = processed()
        with pytest.raises(StoreUnavailable, match="PlaintextToRemoteRedis"):
            await RedisStore.open(f"redis:///0?host={elsewhere}&port={server.port}", keyring, prefix=prefix)
        assert processed() == before + 1
        loopback = f"redis:///0?host={REDIS_HOST}&port={server.port}"
        local = await RedisStore.open(loopback, keyring, prefix=prefix)
        try:
            assert await works(local)
        finally:
            await local.close()


async def first_refusal(url: str, keyring: KeyRing, prefix: str) -> str:
    """Open a store on `url` and read users of many slots: the first refusal's message, or ""."""
    try:
        store = await RedisStore.open(url, keyring, prefix=prefix)
    except StoreUnavailable as exc:
        return str(exc)
    try:
        for n in range(64):  # users of slots all over the cluster, most of them not node 0's
            await store.get_connection(UserRef(ALICE.iss, f"user-{n}"), "github")
    except StoreUnavailable as exc:
        return str(exc)
    finally:
        await store.close()
    return ""


async def test_a_cluster_announcing_its_nodes_elsewhere_is_refused_before_any_command(
    tmp_path: Path, keyring: KeyRing, elsewhere: str
) -> None:
    """The URL names one node, on loopback; the cluster announces the other two elsewhere
    (`cluster-announce-ip`), as its answer to CLUSTER SLOTS and in any MOVED. No command of ours
    reaches those two; with the operator's word the same URL serves users of every slot."""
    group = ClusterGroup(tmp_path / "cluster")
    for node in group.nodes[1:]:
        node.args = (*node.args, "--bind", f"{REDIS_HOST} {elsewhere}", "--cluster-announce-ip", elsewhere)
    with (
        group,
        counting(group.nodes[1]) as first,
        counting(group.nodes[2]) as second,
        redis_prefix() as prefix,
    ):
        url = f"redis+cluster://{REDIS_HOST}:{group.nodes[0].port}"
        before = [first(), second()]
        assert "PlaintextToRemoteRedis" in await first_refusal(url, keyring, prefix)
        assert [first(), second()] == [n + 1 for n in before]
        trusted = await RedisStore.open(url, keyring, prefix=prefix, allow_plaintext=True)
        try:
            assert await works(trusted)
        finally:
            await trusted.close()


def test_store_copy_from_refuses_a_plain_source_elsewhere(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`store copy-from` checks its source URL as `serve` checks MCPUC_STORE_URL: exit 2 before any
    connection, naming the variable and the setting, never the URL (whose password it holds)."""
    with redis_prefix() as prefix:
        key = base64.urlsafe_b64encode(KeyRing.generate_key()).decode().rstrip("=")
        environ = {
            "MCPUC_PUBLIC_URL": "https://mcp.example.com",
            "MCPUC_AUTH_ISSUER": "https://as.example.com",
            "MCPUC_LOGIN_CLIENT_ID": "login",
            "MCPUC_SESSION_SECRET": "s" * 40,
            "MCPUC_ENCRYPTION_KEYS": f"k1:{key}",
            "MCPUC_REQUEST_STATE_KEYS": key,
            "MCPUC_STORE_URL": REDIS_URL,
            "MCPUC_REDIS_PREFIX": prefix,
            "MCPUC_OLD_STORE_URL": "redis://:hunter2@10.20.30.40:6379/0",
        }
        monkeypatch.delenv("MCPUC_CONFIG_FILE", raising=False)
        for name, value in environ.items():
            monkeypatch.setenv(name, value)
        assert main(["store", "copy-from"]) == 2
        err = capsys.readouterr().err
        assert "MCPUC_OLD_STORE_URL" in err and "MCPUC_ALLOW_PLAINTEXT_REDIS" in err, err
        assert "hunter2" not in err and "10.20.30.40" not in err

"""token_store/backends/redis/plaintext.py: which addresses are this machine, and the rule on a
list of them (the connections themselves: tests/integration/token_store/backends/redis/test_plaintext.py)."""

from __future__ import annotations

import pytest

from token_store import (
    PlaintextToRemoteRedis,
    RedisAddress,
    redis_addresses,
    require_tls_to_redis_unless_loopback,
)
from token_store.backends.redis.plaintext import is_loopback


@pytest.mark.parametrize(
    "host", [None, "localhost", "LOCALHOST", "127.0.0.1", "127.3.2.1", "::1", "[::1]", "::ffff:127.0.0.1"]
)
def test_this_machine(host: str | None) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host", ["10.0.0.7", "::ffff:10.0.0.7", "2001:db8::1", "fe80::1%eth0", "redis", "127.0.0.1.example.com"]
)
def test_not_this_machine(host: str) -> None:
    assert not is_loopback(host)


def test_plain_text_elsewhere_is_refused_unless_allowed_and_tls_goes_anywhere() -> None:
    elsewhere = [RedisAddress("127.0.0.1", False), RedisAddress("10.0.0.7", False)]
    with pytest.raises(PlaintextToRemoteRedis, match="rediss://"):
        require_tls_to_redis_unless_loopback(elsewhere, allow_plaintext=False)
    require_tls_to_redis_unless_loopback(elsewhere, allow_plaintext=True)
    require_tls_to_redis_unless_loopback([RedisAddress("10.0.0.7", True)], allow_plaintext=False)


@pytest.mark.parametrize(
    ("url", "addresses"),
    [
        ("redis:///0?host=10.0.0.7", [RedisAddress("10.0.0.7", False)]),
        ("redis://127.0.0.1/0?host=10.0.0.7", [RedisAddress("127.0.0.1", False)]),
        ("redis:///0", [RedisAddress("localhost", False)]),
        ("rediss://:pw@[2001:db8::1]:6380/0", [RedisAddress("2001:db8::1", True)]),
        ("redis+sentinel://a:1,[::1]:2/m", [RedisAddress("a", False), RedisAddress("::1", False)]),
        ("redis+cluster://n1:7000,n2:7001", [RedisAddress("n1", False), RedisAddress("n2", False)]),
        ("postgresql://u:p@db.example/x", []),
    ],
)
def test_a_urls_addresses_are_those_redis_py_connects_to(url: str, addresses: list[RedisAddress]) -> None:
    assert redis_addresses(url) == addresses

"""Plain-text Redis only to this machine, checked where the client really connects.

One rule, `require_tls_to_redis_unless_loopback`, checked twice:

- on the addresses a store URL names, as redis-py reads them (`store.redis_addresses`: the host,
  or a query's `host=` when the URL has none; each sentinel; each cluster node): the settings
  and the CLI refuse such a URL before anything starts, naming the setting, not the URL;
- on every connection the client opens, once its socket is connected and before a byte of the
  protocol (AUTH and its password included) is sent (`connect_hook`, run by redis-py as the
  connection's `redis_connect_func`): the address is the socket's peer, so a primary a sentinel
  hands out, a node a cluster announces or redirects to (MOVED), and a host name that resolves
  elsewhere are checked as well as the URL's own hosts.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import NamedTuple

from redis.asyncio.connection import AbstractConnection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import ConnectionError as RedisConnectionError

_log = logging.getLogger(__name__)

LOCALHOST = "localhost"  # redis-py's host when a URL names none


class RedisAddress(NamedTuple):
    """Where a client talks to Redis: `host` (None: a Unix socket, on this machine) and whether
    the connection is TLS."""

    host: str | None
    tls: bool


class PlaintextToRemoteRedis(RedisConnectionError):
    """A plain-text connection to Redis on another machine, refused. A redis-py `ConnectionError`,
    so that redis-py closes the connection and the store reports `StoreUnavailable`."""


def is_loopback(host: str | None) -> bool:
    """Whether `host` is this machine: a Unix socket (None), `localhost`, or a loopback IP address
    (127.0.0.0/8, ::1, or either written as an IPv4-mapped IPv6 address)."""
    if host is None or host.lower() == LOCALHOST:
        return True
    try:
        address = ipaddress.ip_address(host.removeprefix("[").removesuffix("]").partition("%")[0])
    except ValueError:
        return False  # a name other than localhost: it may resolve anywhere
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def require_tls_to_redis_unless_loopback(addresses: Iterable[RedisAddress], *, allow_plaintext: bool) -> None:
    """Every address is reached over TLS or is this machine, unless the operator allowed plain
    text (for a network they trust). The store's traffic carries the Redis password, the sealed
    token sets and every flow's record; in plain text anyone on the path reads it and can rewrite
    the replies (RFC 6819 §5.1.1, confidentiality of requests: TLS against eavesdroppers)."""
    for address in addresses:
        # mutant: redis.tls_unless_loopback
        if not (address.tls or allow_plaintext or is_loopback(address.host)):
            raise PlaintextToRemoteRedis("plain-text Redis only to loopback: use TLS (rediss://)")


def connect_hook(allow_plaintext: bool) -> Callable[[AbstractConnection], Awaitable[None]]:
    """redis-py's `redis_connect_func` for every connection of a store's client: checks the
    connected socket's peer with `require_tls_to_redis_unless_loopback`, then runs redis-py's own
    handshake (`on_connect`: HELLO, AUTH, SELECT)."""

    async def on_connect(connection: AbstractConnection) -> None:
        if isinstance(connection, UnixDomainSocketConnection):
            peer = RedisAddress(None, False)
        else:
            # The peer's address, not the host asked for; unknown is refused like a remote one.
            peer = RedisAddress(connection.getpeername() or "unknown", isinstance(connection, SSLConnection))
        try:
            require_tls_to_redis_unless_loopback([peer], allow_plaintext=allow_plaintext)
        except PlaintextToRemoteRedis:
            _log.error(
                "redis: refused a plain-text connection to %s, which is not this machine "
                "(use TLS, or allow plain text for a network you trust)",
                peer.host,
            )
            raise
        await connection.on_connect()

    return on_connect

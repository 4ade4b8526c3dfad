"""Checks the token-lifecycle tests share (the two-instance stack itself is
mock_providers.testing.replicas)."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator

from mock_providers.testing.replicas import LifecycleStack
from service.providers.catalogue import ProviderConfig, build_provider
from tests.needs import need_redis
from token_store import (
    Connection,
    ConnectionKey,
    TokenSet,
    UserRef,
)


def running(stack: LifecycleStack) -> Iterator[LifecycleStack]:
    """A module's `stack` fixture: `yield from running(LifecycleStack(...))` (needs Redis)."""
    need_redis()
    try:
        yield stack.start()
    finally:
        stack.stop()


def encodings(secret: str) -> list[bytes]:
    """`secret` as it could sit in storage: plain, and base64 / base64url at any alignment."""
    raw = secret.encode()
    forms = [raw]
    for pad in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(b"\0" * pad + raw).rstrip(b"=")
            # Drop the characters mixing in the padding bytes (start) and the tail (end).
            start = (pad * 4 + 2) // 3
            forms.append(encoded[start : len(encoded) - 2])
    return forms


def leaks(secrets_: Iterable[str], blobs: Iterable[bytes | str]) -> list[str]:
    """The secrets found (in any of `encodings`) in any of `blobs`."""
    data = [b if isinstance(b, bytes) else b.encode() for b in blobs]
    return [s for s in secrets_ if any(form in blob for form in encodings(s) for blob in data)]


CALLERS = 20


def provider() -> ProviderConfig:
    return build_provider(
        "github", {"preset": "github", "client_id": "c"}, {"MCPUC_PROVIDER_GITHUB_CLIENT_SECRET": "s"}
    )


def stale_connection() -> Connection:
    return Connection(
        ConnectionKey(UserRef("https://as", "alice"), "github", "1"),
        TokenSet("old-access", refresh_token="old-refresh", expires_at=1.0),
        "octocat",
        1.0,
        1.0,
    )

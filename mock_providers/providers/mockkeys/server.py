"""MockKeys: a tiny API-key service (no OAuth) for tests of API-key providers, under ``/mockkeys``
(its endpoint: :mod:`mock_providers.providers.mockkeys.routes`).

Keys (``mk_...``) are kept in a :class:`~mock_providers.store.MockStore` (memory unless the
app gives its own) as their SHA-256 only; a test mints one with ``app.state.mockkeys.issue("alice")``
and pastes it into the server's API-key page. Always served (no configuration needed).

Knobs: ``api_mode`` (``"ok"``, ``"junk"``, ``"500"``, ``"hang"``; see :mod:`mock_providers.faults`)
and ``hang_seconds``. Counters: ``me_requests`` (every ``/me`` call), ``rejected_requests`` (those
answered 401), ``issued_keys`` and ``revoked_keys`` (the key strings, for leak scans).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from mock_providers.api.exchange import ApiAnswer
from mock_providers.api.stand_in import StandInApi
from mock_providers.faults import DEFAULT_HANG_SECONDS, EndpointMode
from mock_providers.store import DurableMap, MockStore, RecordCodec

KEY_PREFIX = "mk_"


@dataclass(frozen=True)
class MockKeysAccount:
    """The account a key belongs to. ``id`` is derived from the login, so it is stable everywhere."""

    id: int
    login: str

    @classmethod
    def for_login(cls, login: str) -> MockKeysAccount:
        digest = hashlib.sha256(b"mockkeys:" + login.lower().encode("utf-8")).digest()
        return cls(id=5000 + int.from_bytes(digest[:4], "big") % 90_000_000, login=login)


class KeysApi(StandInApi):
    """An API-key service's API: no built-in surface, only the routes a test adds."""

    provider = "MockKeys"

    def unauthorized(self, reason: str) -> ApiAnswer:
        return ApiAnswer({"error": reason}, 401, {"WWW-Authenticate": 'ApiKey header="X-API-Key"'})


class MockKeys:
    """State, knobs and counters of the API-key service (``app.state.mockkeys``)."""

    def __init__(self, store: MockStore | None = None) -> None:
        self.api_mode: EndpointMode = "ok"
        self.hang_seconds = DEFAULT_HANG_SECONDS
        #: The live keys (durable); a key stored by an earlier run is listed as its digest.
        self.keys: DurableMap[MockKeysAccount] = DurableMap(
            store or MockStore.in_memory(), "mockkeys/keys", RecordCodec(MockKeysAccount, key_field=None)
        )
        self.issued_keys: set[str] = set()
        self.revoked_keys: set[str] = set()
        self.me_requests = 0
        self.rejected_requests = 0
        #: The API a key opens, under ``/mockkeys`` (mock_providers/api/stand_in.py).
        self.api = KeysApi()

    def issue(self, login: str) -> str:
        """A new key for ``login`` (several keys per login are fine)."""
        if not login or len(login) > 64:
            raise ValueError("login must be 1-64 characters")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        self.keys[key] = MockKeysAccount.for_login(login)
        self.issued_keys.add(key)
        return key

    def revoke(self, key: str) -> bool:
        """Stop accepting ``key``; True when it was live."""
        if self.keys.pop(key, None) is None:
            return False
        self.revoked_keys.add(key)
        return True

    def account(self, key: str) -> MockKeysAccount | None:
        return self.keys.get(key)

    def reset_counters(self) -> None:
        self.me_requests = 0
        self.rejected_requests = 0

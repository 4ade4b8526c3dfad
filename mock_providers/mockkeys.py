"""MockKeys: a tiny API-key service (no OAuth) for tests of API-key providers, under ``/mockkeys``.

* ``GET /mockkeys/me`` with header ``X-API-Key: <key>`` answers ``{"id", "login"}`` for a key
  :meth:`MockKeys.issue` created (and not revoked), 401 ``{"error": "invalid_api_key"}`` otherwise.

Keys (``mk_...``) exist only in memory; a test mints one with ``app.state.mockkeys.issue("alice")``
and pastes it into the server's API-key page. Always served (no configuration needed).

Knobs: ``api_mode`` (``"ok"``, ``"junk"``, ``"500"``, ``"hang"``; see :mod:`mock_providers.faults`)
and ``hang_seconds``. Counters: ``me_requests`` (every ``/me`` call), ``rejected_requests`` (those
answered 401), ``issued_keys`` and ``revoked_keys`` (the key strings, for leak scans).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .faults import DEFAULT_HANG_SECONDS, EndpointMode, fault_response

PREFIX = "/mockkeys"
KEY_PREFIX = "mk_"
HEADER = "X-API-Key"


@dataclass(frozen=True)
class MockKeysAccount:
    """The account a key belongs to. ``id`` is derived from the login, so it is stable everywhere."""

    id: int
    login: str

    @classmethod
    def for_login(cls, login: str) -> MockKeysAccount:
        digest = hashlib.sha256(b"mockkeys:" + login.lower().encode("utf-8")).digest()
        return cls(id=5000 + int.from_bytes(digest[:4], "big") % 90_000_000, login=login)


class MockKeys:
    """State, knobs and counters of the API-key service (``app.state.mockkeys``)."""

    def __init__(self) -> None:
        self.api_mode: EndpointMode = "ok"
        self.hang_seconds = DEFAULT_HANG_SECONDS
        self.keys: dict[str, MockKeysAccount] = {}
        self.issued_keys: set[str] = set()
        self.revoked_keys: set[str] = set()
        self.me_requests = 0
        self.rejected_requests = 0

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


class MockKeysRoutes:
    def __init__(self, keys: MockKeys) -> None:
        self.keys = keys

    def routes(self) -> list[Route]:
        return [Route(PREFIX + "/me", self.me, methods=["GET"])]

    async def me(self, request: Request) -> Response:
        self.keys.me_requests += 1
        faulty = await fault_response(self.keys.api_mode, request, hang_seconds=self.keys.hang_seconds)
        if faulty is not None:
            return faulty
        account = self.keys.account(request.headers.get(HEADER, ""))
        if account is None:
            self.keys.rejected_requests += 1
            return JSONResponse(
                {"error": "invalid_api_key"},
                status_code=401,
                headers={"WWW-Authenticate": f'ApiKey header="{HEADER}"', "Cache-Control": "no-store"},
            )
        return JSONResponse({"id": account.id, "login": account.login}, headers={"Cache-Control": "no-store"})

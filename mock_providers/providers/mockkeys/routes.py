"""HTTP endpoint of MockKeys under ``/mockkeys`` (a Starlette handler).

* ``GET /mockkeys/me`` with header ``X-API-Key: <key>`` answers ``{"id", "login"}`` for a key
  :meth:`~mock_providers.providers.mockkeys.server.MockKeys.issue` created (and not revoked), 401
  ``{"error": "invalid_api_key"}`` otherwise.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mock_providers.api.exchange import TokenOwner
from mock_providers.api.routes import ApiEndpoint
from mock_providers.faults import fault_response
from mock_providers.providers.mockkeys.server import MockKeys

PREFIX = "/mockkeys"
HEADER = "X-API-Key"


class MockKeysRoutes:
    def __init__(self, keys: MockKeys) -> None:
        self.keys = keys

    def routes(self) -> list[Route]:
        own = [Route(PREFIX + "/me", self.me, methods=["GET"])]
        return [*own, ApiEndpoint(self.keys.api, PREFIX, own, self.api_owner, self.api_fault).route()]

    async def api_fault(self, request: Request) -> Response | None:
        return await fault_response(self.keys.api_mode, request, hang_seconds=self.keys.hang_seconds)

    async def api_owner(self, request: Request) -> TokenOwner | str:
        """Whose the key in ``X-API-Key`` is, or ``invalid_api_key``."""
        account = self.keys.account(request.headers.get(HEADER, ""))
        if account is None:
            self.keys.rejected_requests += 1
            return "invalid_api_key"
        return TokenOwner(account.login, str(account.id))

    async def me(self, request: Request) -> Response:
        self.keys.me_requests += 1
        faulty = await self.api_fault(request)
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

"""HTTP endpoint of MockKeys under ``/mockkeys`` (a Starlette handler).

* ``GET /mockkeys/me`` with header ``X-API-Key: <key>`` answers ``{"id", "login"}`` for a key
  :meth:`~mock_providers.providers.mockkeys.server.MockKeys.issue` created (and not revoked), 401
  ``{"error": "invalid_api_key"}`` otherwise.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mock_providers.faults import fault_response
from mock_providers.providers.mockkeys.server import MockKeys

PREFIX = "/mockkeys"
HEADER = "X-API-Key"


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

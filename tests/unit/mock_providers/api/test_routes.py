"""mock_providers/api/routes.py: the route that puts a stand-in's API behind its mock: the mock's
own paths kept out, the fault knob first, the token check, and a request without its credential."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mock_providers.api.exchange import ApiRequest, TokenOwner
from mock_providers.api.routes import ApiEndpoint
from mock_providers.api.stand_in import StandInApi


class Knobs:
    fault: Response | None = None


@pytest.fixture
def api() -> StandInApi:
    return StandInApi()


@pytest.fixture
async def http(api: StandInApi) -> AsyncIterator[tuple[httpx.AsyncClient, Knobs]]:
    knobs = Knobs()

    async def token(request: Request) -> Response:
        return JSONResponse({"access_token": "t"})

    async def authenticate(request: Request) -> TokenOwner | str:
        form = await request.form()  # as MockSlack reads a token parameter
        key = request.headers.get("authorization", "") or str(form.get("token", ""))
        return TokenOwner("alice", "7", ("read",)) if key.endswith("good") else "invalid_token"

    async def fault(request: Request) -> Response | None:
        return knobs.fault

    own = [Route("/mock/token", token, methods=["POST"]), Route("/elsewhere", token)]
    app = Starlette(routes=[*own, ApiEndpoint(api, "/mock", own, authenticate, fault).route()])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as client:
        yield client, knobs


async def test_the_request_reaches_the_api_without_its_credential(
    api: StandInApi, http: tuple[httpx.AsyncClient, Knobs]
) -> None:
    client, _ = http
    route = api.route("POST", "/things/{id}", handler=lambda request: {"form": request.form})
    answer = await client.post(
        "/mock/things/3?x=1", data={"token": "good", "name": "n"}, headers={"Cookie": "c=1", "X-Trace": "t"}
    )
    assert answer.json() == {"form": {"token": "good", "name": "n"}}  # the body, read once, still there
    [seen] = route.calls
    assert isinstance(seen, ApiRequest) and seen.owner.login == "alice" and seen.query == {"x": "1"}
    assert seen.url == "http://127.0.0.1/mock/things/3?x=1" and seen.path_params == {"id": "3"}
    assert "cookie" not in seen.headers and seen.headers["x-trace"] == "t"
    bearer = await client.get("/mock/things", headers={"Authorization": "Bearer good"})
    assert bearer.status_code == 404  # no such route: the stand-in's "not found"
    assert "authorization" not in api.calls[-1].request.headers


async def test_what_never_reaches_the_api(api: StandInApi, http: tuple[httpx.AsyncClient, Knobs]) -> None:
    client, knobs = http
    assert api.reserved == {"/token"}  # the mock's own paths under its prefix
    assert (await client.get("/mock/token")).status_code == 405
    assert (await client.get("/mock/.well-known/openid-configuration")).status_code == 404
    refused = await client.get("/mock/things", headers={"Authorization": "Bearer bad"})
    assert (refused.status_code, refused.json()) == (401, {"error": "invalid_token"})
    knobs.fault = JSONResponse({"error": "server_error"}, status_code=500)
    assert (await client.get("/mock/things", headers={"Authorization": "Bearer good"})).status_code == 500
    assert api.calls == []

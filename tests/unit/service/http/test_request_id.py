"""service/http/request_id.py: the shape a request id must have; the id echoed and seen inside the request."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from service.http.drain import Drain
from service.http.request_id import request_id_from
from service.http.request_pass import RequestPass
from service.observability.logs import (
    current_request_id,
)


def test_request_id_shape() -> None:
    assert request_id_from("abc-123_.:") == "abc-123_.:"
    for hostile in (None, "", "a" * 129, "a b", "x\r\nSet-Cookie: y", "é"):
        generated = request_id_from(hostile)
        assert generated != hostile and len(generated) == 32


async def test_request_id_is_echoed_and_visible_inside_the_request() -> None:
    async def handler(request: Request) -> JSONResponse:
        return JSONResponse({"seen": current_request_id()})

    app = RequestPass(Starlette(routes=[Route("/", handler)]), Drain(dict))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        given = await client.get("/", headers={"X-Request-ID": "from-nginx-1"})
        fresh = await client.get("/")
    assert given.headers["x-request-id"] == "from-nginx-1" == given.json()["seen"]
    assert fresh.headers["x-request-id"] == fresh.json()["seen"] and len(fresh.json()["seen"]) == 32
    assert current_request_id() is None

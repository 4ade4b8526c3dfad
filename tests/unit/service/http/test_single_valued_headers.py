"""service/http/single_valued_headers.py: a repeated single-valued header field gets 400 before the
app runs (RFC 9110 §5.3), in the app's one pass over each request (service/http/request_pass.py), in
process."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from mock_providers.demo import build_demo
from service.app import create_app
from service.http.drain import Drain
from service.http.request_pass import RequestPass
from service.http.single_valued_headers import SINGLE_VALUED


class Reached:
    """The wrapped app: answers 200 and counts the requests that got through."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.count += 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def client(app: Reached) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=RequestPass(app, Drain(dict)))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000")


@pytest.mark.parametrize("field", [name.decode() for name in SINGLE_VALUED if name != b"host"])
async def test_a_repeated_single_valued_field_is_refused_before_the_app(field: str) -> None:
    app = Reached()
    async with client(app) as http:
        answer = await http.post("/mcp", headers=[(field, "secret-one"), (field, "secret-two")])
        assert answer.status_code == 400
        assert answer.json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32600,
                "message": f"Bad request: the {field} header field appears more than once.",
            },
        }
        assert "secret" not in answer.text  # the field's name, never its values
        page = await http.get("/connect", headers=[(field.upper(), "a"), (field, "b")])
        assert page.status_code == 400 and page.headers["content-type"].startswith("text/plain")
        assert page.text == f"Bad request: the {field} header field appears more than once."
        assert app.count == 0
        # One line of each passes, and so do list-valued fields repeated.
        single = [(f.decode(), "v") for f in SINGLE_VALUED if f != b"host"]
        assert (await http.post("/mcp", headers=single)).status_code == 200
        lists = [("accept", "application/json"), ("accept", "text/event-stream"), ("x-forwarded-for", "a")]
        assert (await http.get("/", headers=[*lists, ("x-forwarded-for", "b")])).status_code == 200
        assert app.count == 2


async def test_the_check_is_outermost_in_the_app(tmp_path: Path) -> None:
    """Before the drain: a replica closing its sessions answers 404 to a request naming one, but a
    request naming two gets the 400 first."""
    settings = build_demo("127.0.0.1", 9300, 9301, tmp_path).settings
    app = create_app(settings)
    app.state.drain.closing_sessions = True
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=settings.public_url) as http:
        one = await http.post("/mcp", headers={"Mcp-Session-Id": "a"})
        assert one.status_code == 404
        two = await http.post("/mcp", headers=[("Mcp-Session-Id", "a"), ("Mcp-Session-Id", "b")])
        assert two.status_code == 400 and "mcp-session-id" in two.json()["error"]["message"]
        assert "x-request-id" not in two.headers  # answered before the request-id middleware

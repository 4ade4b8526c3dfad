"""mock_providers/api/stand_in.py: the routes a test gives a stand-in (canned or computed, the
newest first, over the built-in surface), the 429 knob, and what was answered; in process."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from mock_providers.api.exchange import ApiAnswer, ApiRequest, Handler, TokenOwner
from mock_providers.api.stand_in import StandInApi

ALICE = TokenOwner("alice", "42", ("read",))


class Builtin(StandInApi):
    provider = "Example"

    def builtin_routes(self) -> Iterable[tuple[str, str, Handler]]:
        return (("GET", "/things/{name}", lambda request: {"builtin": request.path_params["name"]}),)


def request(method: str, path: str, body: bytes = b"", **headers: str) -> ApiRequest:
    return ApiRequest(method, path, "http://127.0.0.1/api" + path, ALICE, headers=headers, body=body)


async def test_a_canned_route_answers_its_method_and_path_only() -> None:
    api = StandInApi()
    route = api.route("GET", "/items", json=[1, 2], status=203, headers={"X-Page": "1"})
    answer = await api.answer(request("GET", "/items"))
    assert (answer.json, answer.status, dict(answer.headers)) == ([1, 2], 203, {"X-Page": "1"})
    assert (await api.answer(request("POST", "/items"))).status == 404
    assert (await api.answer(request("GET", "/items/1"))).status == 404
    assert [r.path for r in route.calls] == ["/items"]
    assert [(c.request.method, c.status) for c in api.calls] == [("GET", 203), ("POST", 404), ("GET", 404)]


async def test_a_handler_sees_the_request_its_parameters_and_the_owner() -> None:
    api = StandInApi()
    seen: list[ApiRequest] = []

    async def create(req: ApiRequest) -> ApiAnswer:
        seen.append(req)
        return ApiAnswer({"by": req.owner.login, "repo": req.path_params["repo"], **req.json}, 201)

    api.route("POST", "/repos/{owner}/{repo}/issues", handler=create)
    answer = await api.answer(request("POST", "/repos/acme/widgets/issues", b'{"title": "t"}'))
    assert (answer.status, answer.json) == (201, {"by": "alice", "repo": "widgets", "title": "t"})
    assert seen[0].path_params == {"owner": "acme", "repo": "widgets"}
    api.route("GET", "/plain", handler=lambda req: {"scopes": list(req.owner.scopes)})
    assert (await api.answer(request("GET", "/plain"))).json == {"scopes": ["read"]}  # a value: 200


async def test_the_newest_route_wins_over_older_ones_and_the_builtin() -> None:
    api = Builtin()
    assert (await api.answer(request("GET", "/things/a"))).json == {"builtin": "a"}
    first = api.route("GET", "/things/{name}", json="first")
    api.route("GET", "/things/a", json="second")
    assert (await api.answer(request("GET", "/things/a"))).json == "second"
    assert (await api.answer(request("GET", "/things/b"))).json == "first"
    api.unroute(first)
    assert (await api.answer(request("GET", "/things/b"))).json == {"builtin": "b"}
    api.reset()
    assert (await api.answer(request("GET", "/things/a"))).json == {"builtin": "a"}
    assert len(api.calls) == 1


async def test_throttle_refuses_the_next_requests_with_retry_after() -> None:
    api = StandInApi()
    api.route("GET", "/items", json=[])
    api.throttle(times=2, retry_after=3)
    answers = [await api.answer(request("GET", "/items")) for _ in range(3)]
    assert [a.status for a in answers] == [429, 429, 200]
    assert answers[0].headers == {"Retry-After": "3"}
    api.throttle(retry_after=None)
    assert "Retry-After" not in (await api.answer(request("GET", "/items"))).headers


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"method": "FETCH", "path": "/x"}, "method 'FETCH' is not one of"),
        ({"method": "GET", "path": "x"}, "must start with '/'"),
        ({"method": "GET", "path": "/token"}, "/token is served by the Example mock itself"),
        ({"method": "GET", "path": "/x", "status": 700}, "is not an HTTP status"),
        ({"method": "GET", "path": "/x", "json": 1, "handler": lambda r: 1}, "either a handler or a canned"),
    ],
)
def test_a_route_that_cannot_be_served_is_refused(arguments: dict[str, Any], message: str) -> None:
    api = Builtin()
    api.reserve(["/token"])
    with pytest.raises(ValueError, match=message):
        api.route(**arguments)


def test_the_body_reads_as_json_or_form() -> None:
    assert request("POST", "/x", b'{"a": 1}').json == {"a": 1}
    assert request("POST", "/x", b"not json").json is None
    form = request("POST", "/x", b"a=1&b=", **{"content-type": "application/x-www-form-urlencoded"})
    assert form.form == {"a": "1", "b": ""}
    assert request("POST", "/x", b"a=1").form == {}

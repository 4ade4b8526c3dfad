"""ProviderSession against small Starlette apps standing in for the providers' APIs, through the
process's real outbound transport (its byte limits and deadline): the token only to the provider,
refresh on 401, rate limits waited out within the call's deadline (a clock that only moves time),
size caps, streaming, and each preset's pagination."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from service.errors import NeedsReauthorization, ProviderApiError
from service.mcp.provider_session import MAX_RATE_LIMIT_WAITS, ProviderCalls, ProviderSession
from service.observability.metrics import Metrics
from service.providers.catalogue import ProviderConfig, build_provider
from service.providers.outbound_http import OutboundHttp
from token_store import Connection, ConnectionKey, TokenSet, UserRef

NOW = 1_800_000_000.0
TOKEN = "gho_secret"
ENV = {f"MCPUC_PROVIDER_{n.upper()}_CLIENT_SECRET": "s" for n in ("github", "google", "slack", "entra")}


def preset(name: str, **fields: Any) -> ProviderConfig:
    extra = {"tenant": "t"} if name == "entra" else {}
    return build_provider(name, {"preset": name, "client_id": "c", **extra, **fields}, ENV)


GITHUB = preset("github")


class Clock:
    """Waits that only move time: no test sleeps."""

    def __init__(self) -> None:
        self.t = NOW
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds


@dataclass
class Lifecycle:
    """The token lifecycle as a session sees it: a refresh hands out `refreshed_to` (or the grant
    is gone), and a token refused after it is reported."""

    refreshed_to: str | None = "gho_fresh"
    refreshes: int = 0
    refused_connections: list[Connection] = field(default_factory=list)

    async def fresh(self, connection: Connection, provider: ProviderConfig, *, force: bool) -> Connection:
        self.refreshes += 1
        if self.refreshed_to is None:
            raise NeedsReauthorization("invalid_grant")
        return replace(connection, tokens=TokenSet(self.refreshed_to, refresh_token="r2"))

    async def refused(self, connection: Connection) -> None:
        self.refused_connections.append(connection)


@dataclass
class World:
    session: ProviderSession
    seen: list[Request]
    clock: Clock
    lifecycle: Lifecycle
    metrics: Metrics

    def rate_limited(self, outcome: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "mcpuc_provider_rate_limited_total", {"provider": self.session.provider.name, "outcome": outcome}
        )
        return value or 0.0


Handler = Callable[[Request], Response]


def world(
    handler: Handler,
    provider: ProviderConfig = GITHUB,
    *,
    lifecycle: Lifecycle | None = None,
    budget: float = 25.0,
) -> World:
    seen: list[Request] = []

    async def endpoint(request: Request) -> Response:
        seen.append(request)
        return handler(request)

    methods = ["GET", "POST", "PATCH", "DELETE"]
    app = Starlette(routes=[Route("/{path:path}", endpoint, methods=methods)])
    outbound = OutboundHttp(5.0, pool=httpx.ASGITransport(app))
    clock, metrics, lifecycle = Clock(), Metrics(), lifecycle or Lifecycle()
    connection = Connection(
        ConnectionKey(UserRef("https://as", "alice"), provider.name, "1"),
        TokenSet(TOKEN, refresh_token="r1"),
        "octocat",
        1,
        1,
    )
    calls = ProviderCalls(outbound.client, metrics, budget, clock)
    session = ProviderSession(connection, provider, lifecycle, calls, tool="test")  # type: ignore[arg-type]
    return World(session, seen, clock, lifecycle, metrics)


def ok(request: Request) -> Response:
    return JSONResponse({"login": "octocat"})


# ---- the token goes only to the provider -----------------------------------------------------------


async def test_paths_go_to_the_api_base_with_the_token() -> None:
    w = world(ok)
    assert await w.session.get_json("/user") == {"login": "octocat"}
    assert str(w.seen[0].url) == "https://api.github.com/user"
    assert w.seen[0].headers["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize(
    "url",
    ["https://evil.example/user", "http://api.github.com/user", "https://api.github.com.evil.example/x"],
)
async def test_the_token_never_goes_to_another_host(url: str) -> None:
    w = world(ok)
    with pytest.raises(ProviderApiError, match="another host"):
        await w.session.get_json(url)
    assert w.seen == []


# ---- a refused token ------------------------------------------------------------------------------


async def test_a_refused_token_is_refreshed_once_and_the_request_sent_again() -> None:
    w = world(
        lambda r: ok(r) if r.headers["authorization"] == "Bearer gho_fresh" else Response(status_code=401)
    )
    assert await w.session.get_json("/user") == {"login": "octocat"}
    assert [r.headers["authorization"] for r in w.seen] == [f"Bearer {TOKEN}", "Bearer gho_fresh"]
    assert w.lifecycle.refreshes == 1 and w.lifecycle.refused_connections == []


async def test_a_token_refused_after_its_refresh_ends_the_call_asking_to_reconnect() -> None:
    w = world(lambda r: Response(status_code=401))
    with pytest.raises(ProviderApiError) as raised:
        await w.session.request("GET", "/user")
    assert (raised.value.status, raised.value.reconnect, raised.value.provider) == (401, True, "github")
    assert len(w.seen) == 2 and w.lifecycle.refreshes == 1
    [marked] = w.lifecycle.refused_connections
    assert marked.tokens.access_token == "gho_fresh"


async def test_a_grant_that_cannot_be_refreshed_ends_the_call_asking_to_reconnect() -> None:
    w = world(lambda r: Response(status_code=401), lifecycle=Lifecycle(refreshed_to=None))
    with pytest.raises(ProviderApiError, match="no longer accepts") as raised:
        await w.session.get_json("/user")
    assert (raised.value.status, raised.value.reconnect) == (401, True)
    assert len(w.seen) == 1


# ---- rate limits ----------------------------------------------------------------------------------


def limited_until(answers: int, headers: dict[str, str], status: int = 429) -> Handler:
    """The first `answers` requests are refused for the rate; the rest answered."""
    count = {"n": 0}

    def handle(request: Request) -> Response:
        count["n"] += 1
        if count["n"] <= answers:
            return JSONResponse({"message": "API rate limit exceeded"}, status, headers=headers)
        return ok(request)

    return handle


async def test_a_429_whose_retry_after_fits_the_deadline_is_waited_out() -> None:
    w = world(limited_until(1, {"Retry-After": "7"}))
    assert await w.session.get_json("/user") == {"login": "octocat"}
    assert w.clock.slept == [7.0]
    assert len(w.seen) == 2
    assert (w.rate_limited("waited"), w.rate_limited("refused")) == (1, 0)


async def test_githubs_exhausted_quota_is_waited_until_its_reset() -> None:
    reset = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(NOW) + 12)}
    w = world(limited_until(1, reset, status=403))
    assert await w.session.post_json("/repos/acme/widgets/issues", {"title": "t"}) == {"login": "octocat"}
    assert w.clock.slept == [12.0]
    assert [r.method for r in w.seen] == ["POST", "POST"]  # refused before it was acted on: safe to resend


async def test_a_rate_limit_past_the_deadline_is_an_error_naming_when_to_retry() -> None:
    w = world(limited_until(99, {"Retry-After": "120"}))
    with pytest.raises(ProviderApiError, match="rate limit") as raised:
        await w.session.get_json("/user/repos")
    assert (raised.value.status, raised.value.retry_after) == (429, 120.0)
    assert w.clock.slept == [] and len(w.seen) == 1
    assert (w.rate_limited("waited"), w.rate_limited("refused")) == (0, 1)


async def test_waits_add_up_against_one_deadline() -> None:
    w = world(limited_until(99, {"Retry-After": "10"}), budget=25.0)
    with pytest.raises(ProviderApiError) as raised:
        await w.session.get_json("/user")
    assert w.clock.slept == [10.0, 10.0]  # a third wait would end past the deadline
    assert raised.value.retry_after == 10.0


async def test_a_provider_that_keeps_refusing_is_given_up_after_a_few_waits() -> None:
    w = world(limited_until(99, {"Retry-After": "0"}))
    with pytest.raises(ProviderApiError):
        await w.session.get_json("/user")
    assert len(w.clock.slept) == MAX_RATE_LIMIT_WAITS


async def test_a_rate_limit_without_a_time_is_not_waited() -> None:
    w = world(limited_until(99, {}))
    with pytest.raises(ProviderApiError) as raised:
        await w.session.get_json("/user")
    assert (raised.value.status, raised.value.retry_after) == (429, None)
    assert w.clock.slept == []


async def test_a_plain_403_is_no_rate_limit() -> None:
    w = world(lambda r: JSONResponse({"message": "Resource not accessible by integration"}, 403))
    with pytest.raises(ProviderApiError, match="HTTP 403: Resource not accessible") as raised:
        await w.session.get_json("/repos/acme/widgets")
    assert (raised.value.status, raised.value.retry_after) == (403, None)
    assert len(w.seen) == 1 and w.clock.slept == []


async def test_request_gives_the_tool_the_answer_whatever_its_status() -> None:
    w = world(lambda r: JSONResponse({"message": "Not Found"}, 404))
    response = await w.session.request("DELETE", "/repos/acme/widgets/issues/1/lock")
    assert response.status_code == 404 and response.json() == {"message": "Not Found"}


# ---- answer sizes ---------------------------------------------------------------------------------


def repos(count: int, size: int = 5_000) -> list[dict[str, Any]]:
    return [{"id": i, "full_name": f"acme/r{i}", "description": "x" * size} for i in range(count)]


async def test_a_page_of_100_repositories_is_read() -> None:
    body = json.dumps(repos(100)).encode()
    assert len(body) > 256 * 1024  # past the profile's cap
    w = world(lambda r: Response(body, media_type="application/json"))
    assert len(await w.session.get_json("/user/repos", params={"per_page": 100})) == 100


async def test_an_answer_over_the_providers_cap_is_an_error_naming_the_cap() -> None:
    small = preset("github", api_max_answer_bytes=64 * 1024)
    w = world(lambda r: JSONResponse(repos(100)), small)
    with pytest.raises(ProviderApiError, match=f"larger than {64 * 1024} bytes") as raised:
        await w.session.get_json("/user/repos")
    assert raised.value.status == 200
    assert "answered HTTP 200" not in str(raised.value)


async def test_a_large_body_streams_in_pieces_up_to_the_stream_cap() -> None:
    blob = b"z" * (3 * 1024 * 1024)
    small = preset("github", api_max_answer_bytes=1024 * 1024, api_max_stream_bytes=4 * 1024 * 1024)
    w = world(lambda r: Response(blob, media_type="application/octet-stream"), small)
    with pytest.raises(ProviderApiError, match="larger than"):
        await w.session.request("GET", "/repos/acme/widgets/tarball")
    async with w.session.stream("GET", "/repos/acme/widgets/tarball") as response:
        got = b"".join([chunk async for chunk in response.aiter_bytes()])
    assert got == blob
    with pytest.raises(ProviderApiError, match=f"larger than {2 * 1024 * 1024} bytes"):
        async with w.session.stream(
            "GET", "/repos/acme/widgets/tarball", max_bytes=2 * 1024 * 1024
        ) as response:
            async for _ in response.aiter_bytes():
                pass


async def test_a_stream_of_a_failed_answer_is_its_error() -> None:
    w = world(lambda r: JSONResponse({"message": "Not Found"}, 404))
    with pytest.raises(ProviderApiError, match="HTTP 404: Not Found"):
        async with w.session.stream("GET", "/repos/acme/nothing/tarball"):
            raise AssertionError("not reached")


# ---- pages ----------------------------------------------------------------------------------------


def github_pages(total: int, host: str = "https://api.github.com") -> Handler:
    """`/user/repos` in pages of `per_page`, with GitHub's `Link` header."""

    def handle(request: Request) -> Response:
        per_page, page = (
            int(request.query_params.get("per_page", 30)),
            int(request.query_params.get("page", 1)),
        )
        start = (page - 1) * per_page
        headers = {}
        if start + per_page < total:
            headers["Link"] = (
                f'<{host}/user/repos?per_page={per_page}&page={page + 1}>; rel="next", '
                f'<{host}/user/repos?per_page={per_page}&page={-(-total // per_page)}>; rel="last"'
            )
        return JSONResponse(repos(min(per_page, total - start), 10), headers=headers)

    return handle


async def test_github_pages_follow_the_link_header() -> None:
    w = world(github_pages(250))
    pages = w.session.pages("/user/repos", params={"per_page": 100})
    names = [repo["full_name"] async for repo in pages]
    assert names == [f"acme/r{i}" for i in range(100)] * 2 + [f"acme/r{i}" for i in range(50)]
    assert (pages.pages_read, pages.truncated) == (3, False)
    assert [r.url.query for r in w.seen] == [
        "per_page=100",
        "per_page=100&page=2",
        "per_page=100&page=3",
    ]


@pytest.mark.parametrize(
    ("bounds", "read", "pages_read"), [({"max_items": 150}, 150, 2), ({"max_pages": 2}, 200, 2)]
)
async def test_pages_stop_at_their_bounds_and_say_so(
    bounds: dict[str, int], read: int, pages_read: int
) -> None:
    w = world(github_pages(1000))
    pages = w.session.pages("/user/repos", params={"per_page": 100}, **bounds)
    assert len([repo async for repo in pages]) == read
    assert (pages.pages_read, pages.truncated) == (pages_read, True)


async def test_pages_ending_exactly_at_the_item_bound_are_not_truncated() -> None:
    w = world(github_pages(200))
    pages = w.session.pages("/user/repos", params={"per_page": 100}, max_items=200)
    assert len([repo async for repo in pages]) == 200
    assert pages.truncated is False


async def test_a_next_page_on_another_host_is_refused_before_anything_is_sent_there() -> None:
    """RFC 6750 §5.3: the provider's Link header must not lead the token elsewhere."""
    w = world(github_pages(250, host="https://api.github.com.evil.example"))
    pages = w.session.pages("/user/repos", params={"per_page": 100})
    with pytest.raises(ProviderApiError, match="another host"):
        [repo async for repo in pages]
    assert [r.url.hostname for r in w.seen] == ["api.github.com"]


async def test_google_pages_follow_next_page_token() -> None:
    def drive(request: Request) -> Response:
        token = request.query_params.get("pageToken")
        following = {None: "t2", "t2": "t3", "t3": None}[token]
        body: dict[str, Any] = {"files": [{"id": f"{token}-{i}"} for i in range(2)]}
        if following:
            body["nextPageToken"] = following
        return JSONResponse(body)

    w = world(drive, preset("google"))
    ids = [f["id"] async for f in w.session.pages("/drive/v3/files", params={"pageSize": 2}, items="files")]
    assert ids == ["None-0", "None-1", "t2-0", "t2-1", "t3-0", "t3-1"]
    assert w.seen[1].query_params["pageToken"] == "t2" and w.seen[1].query_params["pageSize"] == "2"


async def test_slack_pages_follow_next_cursor_and_its_ok_false_is_an_error() -> None:
    def channels(request: Request) -> Response:
        cursor = request.query_params.get("cursor", "")
        if cursor == "bad":
            return JSONResponse({"ok": False, "error": "invalid_cursor"})
        following = {"": "dGVhbTpD", "dGVhbTpD": ""}[cursor]
        return JSONResponse(
            {"ok": True, "channels": [{"id": f"C{cursor}"}], "response_metadata": {"next_cursor": following}}
        )

    w = world(channels, preset("slack"))
    found = [c["id"] async for c in w.session.pages("/conversations.list", items="channels")]
    assert found == ["C", "CdGVhbTpD"]
    with pytest.raises(ProviderApiError, match="invalid_cursor"):
        [c async for c in w.session.pages("/conversations.list", params={"cursor": "bad"}, items="channels")]


async def test_graph_pages_follow_odata_next_link_under_value() -> None:
    def messages(request: Request) -> Response:
        skip = int(request.query_params.get("$skip", 0))
        body: dict[str, Any] = {"value": [{"id": skip}]}
        if skip < 2:
            body["@odata.nextLink"] = f"https://graph.microsoft.com/v1.0/me/messages?$skip={skip + 1}"
        return JSONResponse(body)

    w = world(messages, preset("entra"))
    assert [m["id"] async for m in w.session.pages("/me/messages")] == [0, 1, 2]


async def test_a_page_that_is_not_a_list_is_an_error() -> None:
    w = world(lambda r: JSONResponse({"message": "weird"}))
    with pytest.raises(ProviderApiError, match="not a JSON array"):
        [item async for item in w.session.pages("/user/repos")]

"""The mock providers' knobs by name: one table per provider, used by the loopback-only admin
endpoint (``GET``/``POST /_admin/<provider>``) and by ``mcp-url-connect mock-providers``' options.

A separate process (scripts/drill.py, curl, a non-Python test) steers a running ``mock-providers``
through the endpoint: knobs to set, one action (expire tokens, revoke a user's grant, mint an API
key, ...), and counters to read. docs/mock-providers.md lists them all.

Only a client on this machine may use it, talking to it directly: the TCP peer must be a
loopback address, the request must carry no proxy headers (``Forwarded``, ``X-Forwarded-For``:
a local reverse proxy would make every peer loopback) and its ``Host`` must be a loopback name (a
DNS-rebinding page in the developer's browser names its own host). Anyone else gets 404. A POST
must be ``application/json``, which a cross-site form cannot send without a CORS preflight this
endpoint never answers.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mock_providers.faults import check_mode
from mock_providers.providers.mockgoogle.server import MockGoogle
from mock_providers.providers.mockhub.server import MockHub
from mock_providers.providers.mockkeys.server import MockKeys
from mock_providers.providers.mockslack.server import MockSlack

ADMIN_PREFIX = "/_admin"
LOOPBACK_NAMES = frozenset({"localhost"})
# Any of these says a proxy relayed the request (its peer is then loopback whoever sent it). A
# bare `proxy_pass` adds none of them, which is why the docs say: never put a proxy in front.
PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip", "via")

Parse = Callable[[object], object]


def admin_path(provider: str) -> str:
    return f"{ADMIN_PREFIX}/{provider}"


# -- knob values -------------------------------------------------------------------------------


def _mode(value: object) -> object:
    if not isinstance(value, str):
        raise ValueError("an endpoint mode is a string")
    return check_mode(value)


def _iss_mode(value: object) -> object:
    if value not in ("correct", "omit", "wrong"):
        raise ValueError("iss_mode is one of correct, omit, wrong")
    return value


def _seconds(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 86400:
        raise ValueError("a duration is a number of seconds from 0 to 86400")
    return float(value)


def _bytes(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1024**3:
        raise ValueError("huge_body_bytes is a whole number of bytes from 0 to 1 GiB")
    return value


def _ttl(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10 * 365 * 86400:
        raise ValueError("a lifetime is a whole number of seconds, at least 1")
    return value


def _optional_ttl(value: object) -> object:
    return None if value is None else _ttl(value)


def _flag(value: object) -> object:
    if not isinstance(value, bool):
        raise ValueError("a switch is true or false")
    return value


def _label(value: object) -> object:
    if not isinstance(value, str) or not 1 <= len(value) <= 64:
        raise ValueError("a name is 1-64 characters")
    return value


def _login(body: Mapping[str, object]) -> str:
    login = body.get("login")
    if not isinstance(login, str) or not 1 <= len(login) <= 254:
        raise ValueError("this action needs a 'login' (1-254 characters)")
    return login


def _count(body: Mapping[str, object], name: str, default: int | None) -> int | None:
    """A whole number argument of an action (0 to 1 000 000), or `default` when absent."""
    value = body.get(name, default)
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1_000_000:
        raise ValueError(f"'{name}' is a whole number from 0 to 1000000")
    return value


def _throttle(provider: Any, body: Mapping[str, object]) -> object:
    provider.api.throttle(times=_count(body, "times", 1), retry_after=_count(body, "retry_after", None))
    return None


# The API stand-in's knobs (mock_providers/api/): every provider with an API has `throttle`.
_API: dict[str, Callable[[Any, Mapping[str, object]], object]] = {"throttle": _throttle}
_GITHUB_API: dict[str, Callable[[Any, Mapping[str, object]], object]] = {
    **_API,
    "secondary_limit": lambda p, body: p.api.secondary_limit(
        times=_count(body, "times", 1),
        retry_after=_count(body, "retry_after", None),
        reset_in=_count(body, "reset_in", 60),
    ),
    "exhaust_rate_limit": lambda p, body: p.api.exhaust_rate_limit(reset_in=_count(body, "reset_in", 60)),
    "set_repo_count": lambda p, body: p.api.set_repo_count(_login(body), _count(body, "count", 3)),
}


def _set_channel_count(slack: Any, body: Mapping[str, object]) -> object:
    slack.api.channel_count = _count(body, "count", 5)
    return None


#: What an action may be given besides its name.
ACTION_ARGUMENTS = ("login", "key", "times", "retry_after", "reset_in", "count")

# -- per provider ------------------------------------------------------------------------------

_FAULTS: dict[str, Parse] = {
    "token_endpoint_mode": _mode,
    "api_mode": _mode,
    "hang_seconds": _seconds,
    "huge_body_bytes": _bytes,
    "drip_seconds": _seconds,
}
_ISSUING: dict[str, Parse] = {**_FAULTS, "iss_mode": _iss_mode, "access_token_ttl": _ttl}


@dataclass(frozen=True)
class AdminSpec:
    """What the endpoint may do to one kind of provider: ``knobs`` (name -> value check),
    ``actions`` (name -> what it does, given the request body; its result is sent back) and
    ``counters`` (attribute names; sets and lists are sent as their size, never their tokens)."""

    knobs: dict[str, Parse]
    counters: tuple[str, ...]
    actions: dict[str, Callable[[Any, Mapping[str, object]], object]] = field(default_factory=dict)


def _reset(provider: Any, body: Mapping[str, object]) -> object:
    provider.reset_counters()
    return None


_REVOKING: dict[str, Callable[[Any, Mapping[str, object]], object]] = {
    "revoke_grant": lambda p, body: {"revoked": p.revoke_grant(_login(body))},
    "revoke_all_tokens": lambda p, body: {"revoked": p.revoke_all_tokens()},
    "reset_counters": _reset,
}


def _issue_key(keys: MockKeys, body: Mapping[str, object]) -> object:
    # The new key is the point of this action (a drill pastes it into the server's page); it
    # goes only to the loopback caller, in the body, like `keys.issue` returns it to a test.
    return {"key": keys.issue(_login(body))}


def _revoke_key(keys: MockKeys, body: Mapping[str, object]) -> object:
    key = body.get("key")
    if not isinstance(key, str):
        raise ValueError("this action needs a 'key'")
    return {"revoked": keys.revoke(key)}


SPECS: dict[type, AdminSpec] = {
    MockHub: AdminSpec(
        knobs={
            **_ISSUING,
            "rotate_refresh_tokens": _flag,
            "revoke_grant_on_reuse": _flag,
            "refresh_token_lifetime": _optional_ttl,
        },
        counters=(
            "token_requests",
            "refresh_requests",
            "reuse_detections",
            "user_requests",
            "issued_access_tokens",
            "issued_refresh_tokens",
            "revoked_tokens",
        ),
        actions={
            **_REVOKING,
            **_GITHUB_API,
            "expire_access_tokens": lambda p, body: p.expire_access_tokens(),
            "expire_refresh_tokens": lambda p, body: p.expire_refresh_tokens(),
        },
    ),
    MockGoogle: AdminSpec(
        knobs=_ISSUING,
        counters=(
            "token_requests",
            "refresh_requests",
            "userinfo_requests",
            "issued_access_tokens",
            "issued_refresh_tokens",
            "issued_id_tokens",
            "revoked_tokens",
        ),
        actions={
            **_REVOKING,
            **_API,
            "expire_access_tokens": lambda p, body: p.expire_access_tokens(),
            "set_file_count": lambda p, body: p.api.set_file_count(_login(body), _count(body, "count", 5)),
        },
    ),
    MockSlack: AdminSpec(
        knobs={**_FAULTS, "team_id": _label, "team_name": _label},
        counters=(
            "token_requests",
            "auth_test_requests",
            "issued_bot_tokens",
            "issued_user_tokens",
            "revoked_tokens",
        ),
        actions={**_REVOKING, **_API, "set_channel_count": _set_channel_count},
    ),
    MockKeys: AdminSpec(
        knobs={"api_mode": _mode, "hang_seconds": _seconds},
        counters=("me_requests", "rejected_requests", "issued_keys", "revoked_keys", "keys"),
        actions={"issue": _issue_key, "revoke": _revoke_key, "reset_counters": _reset, **_API},
    ),
}


def spec_for(provider: object) -> AdminSpec:
    return SPECS[type(provider)]


def apply_knobs(provider: object, knobs: Mapping[str, object]) -> None:
    """Set ``knobs`` on ``provider`` after checking every one (all or nothing); ``ValueError``
    names an unknown knob or a bad value."""
    spec = spec_for(provider)
    unknown = sorted(set(knobs) - set(spec.knobs))
    if unknown:
        raise ValueError(f"unknown knob(s) {', '.join(unknown)}; known: {', '.join(spec.knobs)}")
    checked = {name: spec.knobs[name](value) for name, value in knobs.items()}
    for name, value in checked.items():
        setattr(provider, name, value)


def snapshot(provider: object) -> dict[str, object]:
    """The provider's knobs and counters, as ``GET /_admin/<provider>`` answers."""
    spec = spec_for(provider)
    counters: dict[str, object] = {}
    for name in spec.counters:
        value = getattr(provider, name)
        counters[name] = value if isinstance(value, int) else len(value)
    return {"knobs": {name: getattr(provider, name) for name in spec.knobs}, "counters": counters}


# -- the endpoint --------------------------------------------------------------------------------


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # not an IP address (e.g. httpx.ASGITransport's "testclient")
        return False


def is_local_request(request: Request) -> bool:
    """From this machine, directly: loopback peer, loopback ``Host``, no proxy headers."""
    peer = request.client.host if request.client is not None else None
    if not _is_loopback(peer) or any(name in request.headers for name in PROXY_HEADERS):
        return False
    return _is_loopback(request.url.hostname)


class AdminRoutes:
    """``GET``/``POST /_admin/<provider>`` for the providers this app serves (by path name)."""

    def __init__(self, providers: Mapping[str, object]) -> None:
        self.providers = {name: p for name, p in providers.items() if p is not None}

    def routes(self) -> list[Route]:
        return [Route(ADMIN_PREFIX + "/{provider}", self.handle, methods=["GET", "POST"])]

    async def handle(self, request: Request) -> Response:
        provider = self.providers.get(request.path_params["provider"])
        if provider is None or not is_local_request(request):
            return JSONResponse({"error": "not_found"}, status_code=404)
        if request.method == "GET":
            return JSONResponse(snapshot(provider), headers={"Cache-Control": "no-store"})
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return JSONResponse({"error": "unsupported_media_type"}, status_code=415)
        try:
            body = json.loads(await request.body())
            if not isinstance(body, dict):
                raise ValueError("send a JSON object of knobs, and optionally an 'action'")
            result = self._apply(provider, body)
        except (ValueError, TypeError) as exc:
            return JSONResponse({"error": "invalid_request", "error_description": str(exc)}, status_code=400)
        answer = snapshot(provider)
        if result is not None:
            answer["result"] = result
        return JSONResponse(answer, headers={"Cache-Control": "no-store"})

    @staticmethod
    def _apply(provider: object, body: dict[str, object]) -> object:
        spec = spec_for(provider)
        action_name = body.pop("action", None)
        action = None
        if action_name is not None:
            if not isinstance(action_name, str) or action_name not in spec.actions:
                raise ValueError(f"unknown action; known: {', '.join(spec.actions)}")
            action = spec.actions[action_name]
        arguments: dict[str, object] = {name: body.pop(name) for name in ACTION_ARGUMENTS if name in body}
        if arguments and action is None:
            raise ValueError(f"{', '.join(sorted(arguments))}: arguments of an 'action', sent without one")
        apply_knobs(provider, body)
        return None if action is None else action(provider, arguments)

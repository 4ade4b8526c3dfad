"""What a stand-in API route sees and answers: plain data, so a test's handler needs no web
framework (docs/mock-providers.md, "Stand-ins for real APIs")."""

from __future__ import annotations

import json as jsonlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl


@dataclass(frozen=True)
class TokenOwner:
    """Who the presented token belongs to, as the stand-in that issued it knows them.

    ``login`` is the account's name at the provider (a GitHub login, a Google email address, a
    Slack user name, a MockKeys login), ``id`` its stable id there (GitHub's number as text,
    Google's ``sub``, Slack's ``U…``), ``scopes`` what the token was granted."""

    login: str
    id: str
    scopes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ApiRequest:
    """One API request that passed the stand-in's token check.

    ``path`` is relative to the provider's API base (``/user/repos``), ``path_params`` what the
    route's ``{name}`` parts matched, ``url`` the full URL as received (for links to further
    pages). ``headers`` have lower-case names and never the credential itself: ``owner`` says
    whose it is. ``json`` is the parsed JSON body (``None`` without one), ``form`` the fields of a
    form-encoded body."""

    method: str
    path: str
    url: str
    owner: TokenOwner
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    path_params: Mapping[str, str] = field(default_factory=dict)

    @property
    def json(self) -> Any:
        """The body as JSON; ``None`` when it is empty or not JSON."""
        if not self.body:
            return None
        try:
            return jsonlib.loads(self.body)
        except ValueError:
            return None

    @property
    def form(self) -> dict[str, str]:
        """The fields of an ``application/x-www-form-urlencoded`` body (empty otherwise)."""
        if not self.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return {}
        return dict(parse_qsl(self.body.decode("utf-8", "replace"), keep_blank_values=True))

    def with_path_params(self, params: Mapping[str, str]) -> ApiRequest:
        return ApiRequest(
            self.method, self.path, self.url, self.owner, self.query, self.headers, self.body, dict(params)
        )


@dataclass(frozen=True)
class ApiAnswer:
    """An API answer: ``json`` is the body (``None``: no body), sent with ``status`` and
    ``headers``."""

    json: Any = None
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)

    def with_headers(self, extra: Mapping[str, str]) -> ApiAnswer:
        return ApiAnswer(self.json, self.status, {**extra, **self.headers})


#: A route's function: sees the request (and its ``owner``), returns an :class:`ApiAnswer` or a
#: JSON value (sent with status 200); may be ``async``. It runs on the stand-in's own thread.
Handler = Callable[[ApiRequest], "ApiAnswer | Any | Awaitable[ApiAnswer | Any]"]

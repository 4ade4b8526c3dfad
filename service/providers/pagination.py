"""Where a provider's next page is, by the pagination convention of its preset (`ProviderConfig.pagination`).

- `link_header` (GitHub): the `Link` header's `rel="next"` target (RFC 8288 §3), a URL;
- `next_page_token` (Google): the answer's `nextPageToken`, sent back as the `pageToken` parameter;
- `next_cursor` (Slack): the answer's `response_metadata.next_cursor`, sent back as `cursor`; an
  empty cursor is the last page, and an answer with `"ok": false` is an error;
- `odata_next_link` (Microsoft Graph): the answer's `@odata.nextLink`, a URL; items under `value`;
- `none`: one page.

A next page given as a URL is the provider's to choose, so it is followed only on the origin of
the page that named it (`require_next_page_on_same_origin`): the user's token goes with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeGuard

import httpx

from service.errors import ProviderApiError
from service.urls import origin

PaginationStyle = Literal["none", "link_header", "next_page_token", "next_cursor", "odata_next_link"]

# Where each convention keeps a page's items when the tool names no field: the page itself (None)
# or a field every answer of that API uses.
DEFAULT_ITEMS: dict[str, str | None] = {"odata_next_link": "value"}
# A cursor or page token is the provider's opaque string, sent back as a query parameter.
MAX_TOKEN_CHARS = 4096


@dataclass(frozen=True)
class NextPage:
    """The next request: a URL of its own, or the same request with `params` added."""

    url: str | None = None
    params: dict[str, str] = field(default_factory=dict)


def next_page(style: PaginationStyle, response: httpx.Response, body: Any) -> NextPage | None:
    """The page after `response` (whose JSON is `body`), or None on the last page."""
    if style == "link_header":
        target = response.links.get("next", {}).get("url")
        # RFC 8288 §3.1: a relative target is resolved against the request's URL.
        return NextPage(url=str(response.url.join(target))) if target else None
    if style == "odata_next_link":
        target = body.get("@odata.nextLink") if isinstance(body, dict) else None
        return NextPage(url=target) if isinstance(target, str) and target else None
    if style == "next_page_token":
        token = body.get("nextPageToken") if isinstance(body, dict) else None
        return NextPage(params={"pageToken": token}) if _opaque(token) else None
    if style == "next_cursor":
        metadata = body.get("response_metadata") if isinstance(body, dict) else None
        cursor = metadata.get("next_cursor") if isinstance(metadata, dict) else None
        return NextPage(params={"cursor": cursor}) if _opaque(cursor) else None
    return None


def _opaque(token: object) -> TypeGuard[str]:
    return isinstance(token, str) and 0 < len(token) <= MAX_TOKEN_CHARS


def items_of(body: Any, field_name: str | None, display_name: str) -> list[Any]:
    """The list of items a page holds: the page itself, or its `field_name`."""
    found = body if field_name is None else (body.get(field_name) if isinstance(body, dict) else None)
    if not isinstance(found, list):
        where = "a JSON array" if field_name is None else f"a list under {field_name!r}"
        raise ProviderApiError(f"{display_name} answered a page that is not {where}", status=200)
    return found


def refused_in_body(style: PaginationStyle, body: Any) -> str | None:
    """Slack answers most errors with HTTP 200 and `{"ok": false, "error": "<code>"}`: its code,
    cut short (Slack's codes are short snake_case words), or None for a good page."""
    if style != "next_cursor" or not isinstance(body, dict) or body.get("ok") is not False:
        return None
    code = body.get("error")
    return "".join(c for c in str(code)[:64] if c.isalnum() or c in "_.-") or "unknown_error"


def require_next_page_on_same_origin(next_url: str, page_url: httpx.URL, display_name: str) -> str:
    """A next-page URL (a `Link` header's, an `@odata.nextLink`) is followed, with the user's
    token, only on the origin (scheme, host, port) of the page that named it: RFC 6750 §5.3
    "Don't pass bearer tokens ... to untrusted parties", and RFC 9700 §4.9.1 (a token reaches only
    the resource it is meant for)."""
    # mutant: pagination.next_page_same_origin
    if origin(next_url) != origin(str(page_url)):
        raise ProviderApiError(
            f"{display_name}'s next page is on another host; it was not followed, and the user's token "
            "was not sent there"
        )
    return next_url

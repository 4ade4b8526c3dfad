"""The three ways the built-in surfaces page a list, as their providers do: GitHub's page numbers
with a ``Link`` header (RFC 8288), and the opaque continuation tokens of Google (``pageToken`` /
``nextPageToken``) and Slack (``cursor`` / ``response_metadata.next_cursor``)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

T = TypeVar("T")


def int_param(query: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    """``query[name]`` as a whole number clamped to ``low..high``; ``default`` when absent or not a
    number (GitHub ignores a malformed ``per_page`` or ``page``; Google and Slack cap a size)."""
    try:
        value = int(query.get(name, default))
    except ValueError:
        return default
    return max(low, min(high, value))


def page_numbers(
    items: Sequence[T], query: Mapping[str, str], default_size: int, max_size: int
) -> tuple[list[T], int, int]:
    """GitHub's ``page`` (from 1) and ``per_page``: the page's items, the page, the last page."""
    per_page = int_param(query, "per_page", default_size, 1, max_size)
    page = int_param(query, "page", 1, 1, 1_000_000)
    last = max(1, -(-len(items) // per_page))
    start = (page - 1) * per_page
    return list(items[start : start + per_page]), page, last


def link_header(url: str, page: int, last: int) -> str | None:
    """GitHub's ``Link``: ``prev``, ``next``, ``last`` and ``first`` pages of ``url`` (its other
    parameters kept), or ``None`` when everything fits on one page."""
    if last <= 1:
        return None
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "page"]

    def at(number: int) -> str:
        return urlunsplit(parts._replace(query=urlencode([*query, ("page", str(number))])))

    links = []
    if page > 1:
        links.append(f'<{at(min(page - 1, last))}>; rel="prev"')
    if page < last:
        links.append(f'<{at(page + 1)}>; rel="next"')
        links.append(f'<{at(last)}>; rel="last"')
    if page > 1:
        links.append(f'<{at(1)}>; rel="first"')
    return ", ".join(links)


def continuation(kind: str, offset: int) -> str:
    """An opaque token for the list from ``offset`` on (what ``nextPageToken`` and
    ``next_cursor`` carry)."""
    return base64.urlsafe_b64encode(f"{kind}:{offset}".encode()).decode()


def continued_from(kind: str, token: str) -> int | None:
    """The offset a :func:`continuation` token names; ``None`` for anything else."""
    try:
        text = base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    label, _, number = text.partition(":")
    if label != kind or not number.isdigit():
        return None
    return int(number)

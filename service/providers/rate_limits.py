"""Reading a provider's rate limit from its answer: whether it is one, and when it ends.

Providers say it in three ways: 429 Too Many Requests (RFC 6585 §4), usually with `Retry-After`;
GitHub's 403 with `Retry-After` (its secondary limits) or with `X-RateLimit-Remaining: 0` and
`X-RateLimit-Reset` (its primary limit, the reset as epoch seconds); and `Retry-After` on a 503
(RFC 9110 §15.6.4), which says when to try again but is not a rate limit: the request may not
be sent again by us, though the model may.
"""

from __future__ import annotations

from datetime import UTC
from email.utils import parsedate_to_datetime

import httpx

# `Retry-After` and `X-RateLimit-Reset` are numbers a provider writes: ten digits cover every
# epoch second until 2286 and any sensible delay; longer is junk, ignored rather than parsed.
MAX_DIGITS = 10


def is_rate_limited(response: httpx.Response) -> bool:
    """The provider refused the request for its rate, before acting on it, so sending the same
    request again later is safe whatever its method."""
    if response.status_code == 429:
        return True
    headers = response.headers
    return response.status_code == 403 and (
        "retry-after" in headers or headers.get("x-ratelimit-remaining", "").strip() == "0"
    )


def retry_after_seconds(response: httpx.Response, now: float) -> float | None:
    """Seconds from `now` (epoch seconds) until the provider takes requests again, when it said:
    `Retry-After` as delay-seconds or an HTTP-date (RFC 9110 §10.2.3), else the reset of an
    exhausted `X-RateLimit-*` quota. Never negative; None when the answer names no time."""
    headers = response.headers
    said = headers.get("retry-after", "").strip()
    if said:
        if said.isdigit() and len(said) <= MAX_DIGITS:
            return float(said)
        try:
            when = parsedate_to_datetime(said)
        except (TypeError, ValueError, IndexError):
            return None
        # An HTTP-date is UTC ("GMT"); one without a zone is read as UTC too.
        return max(0.0, when.replace(tzinfo=when.tzinfo or UTC).timestamp() - now)
    reset = headers.get("x-ratelimit-reset", "").strip()
    exhausted = headers.get("x-ratelimit-remaining", "").strip() == "0"
    if exhausted and reset.isdigit() and len(reset) <= MAX_DIGITS:
        return max(0.0, float(reset) - now)
    return None

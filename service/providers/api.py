"""Calls to a provider's API with a stored token. The token goes only to the provider that issued it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import httpx

from service.errors import ProviderApiError
from service.providers.catalogue import ProviderConfig
from service.providers.rate_limits import is_rate_limited, retry_after_seconds

# A profile (userinfo) is a few hundred bytes; an API answer is capped per provider instead
# (`ProviderConfig.api_max_answer_bytes`).
MAX_PROFILE_BYTES = 256 * 1024
# The provider's own error message, as the model reads it: a sentence, not a document.
MAX_PROVIDER_MESSAGE_CHARS = 200


def auth_headers(provider: ProviderConfig, secret: str) -> dict[str, str]:
    """How the user's token (or API key) is presented to `provider`."""
    if provider.kind == "api_key":
        return {provider.api_key_header: provider.api_key_format.format(key=secret)}
    return {"Authorization": f"Bearer {secret}"}


def field_at(data: Any, dotted: str) -> Any:
    """`data["a"]["b"]` for "a.b" (Slack nests the user under `authed_user`); None when absent."""
    for part in dotted.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def did_not_answer(provider: ProviderConfig, exc: httpx.HTTPError) -> ProviderApiError:
    """The error for a request that got no answer (connection, TLS or timeout failure)."""
    return ProviderApiError(
        f"{provider.display_name} did not answer ({type(exc).__name__})", provider=provider.name
    )


def too_large(provider: ProviderConfig, limit: int, status: int | None) -> ProviderApiError:
    """The error for an answer past the byte cap that reading it was given (its name in the
    provider entry: `api_max_answer_bytes`, `api_max_stream_bytes`)."""
    return ProviderApiError(
        f"{provider.display_name}'s answer is larger than {limit} bytes ({limit / 1024 / 1024:.4g} MiB), "
        "the most this server reads of one answer; ask for less (fewer results per page, a narrower query)",
        provider=provider.name,
        status=status,
    )


def answer_error(
    provider: ProviderConfig, response: httpx.Response, secrets: Sequence[str] = (), now: float | None = None
) -> ProviderApiError:
    """The error for a provider's non-2xx answer (redirects are not followed, so a 3xx is one
    too): its status; when it is a rate limit or a 503, the seconds the provider asked us to wait
    (`now`: epoch seconds, for an HTTP-date or a reset time); and its own short error message
    (`provider_message`), never the rest of its body."""
    status = response.status_code
    limited = is_rate_limited(response)
    waits = limited or status == 503
    retry_after = retry_after_seconds(response, time.time() if now is None else now) if waits else None
    what = (
        f"{provider.display_name} refused the request for its rate limit (HTTP {status})"
        if limited
        else f"{provider.display_name} answered HTTP {status}"
    )
    said = provider_message(response, secrets)
    return ProviderApiError(
        f"{what}: {said}" if said else what,
        provider=provider.name,
        status=status,
        retry_after=retry_after,
        reconnect=False,
    )


def provider_message(response: httpx.Response, secrets: Sequence[str]) -> str | None:
    """The provider's own error message, where the big APIs put it (GitHub `message`, Google
    `error.message`, Slack `error`, OAuth `error_description`), as text fit for the model:
    `redact_connection_secrets`, then only printable characters, at most
    MAX_PROVIDER_MESSAGE_CHARS. None when the answer is not JSON or names none."""
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    candidates = (
        body.get("message"),
        error.get("message") if isinstance(error, dict) else error,
        body.get("error_description"),
    )
    said = next((c for c in candidates if isinstance(c, str) and c.strip()), None)
    if said is None:
        return None
    redacted = redact_connection_secrets(said, secrets)
    printable = " ".join("".join(c if c.isprintable() else " " for c in redacted).split())
    if len(printable) > MAX_PROVIDER_MESSAGE_CHARS:
        printable = printable[: MAX_PROVIDER_MESSAGE_CHARS - 1] + "…"
    return printable or None


def redact_connection_secrets(text: str, secrets: Sequence[str]) -> str:
    """`text` (written by the provider) with every token of the connection replaced: a provider
    that echoes the request in its error must not put the user's token in a tool result, which
    the model, the client and their logs all read (RFC 6750 §5.3; RFC 6819 §5.1.6)."""
    for secret in secrets:
        # mutant: api.redact_connection_secrets
        if secret:
            text = text.replace(secret, "[redacted]")
    return text


def read_json(
    provider: ProviderConfig,
    response: httpx.Response,
    *,
    limit: int = MAX_PROFILE_BYTES,
    secrets: Sequence[str] = (),
    now: float | None = None,
) -> Any:
    """The JSON body of a provider's 2xx answer, or the ProviderApiError for its answer: the one
    rule for reading a provider's JSON (userinfo, and a tool's `ProviderSession` calls).

    401 means the token was refused (the caller may refresh and ask again); any other non-2xx
    answer is `answer_error`; a body over `limit` bytes, or a body that is not JSON, an error
    saying so. An empty 2xx body (204 No Content) is None. The media type is not checked: the
    body is parsed as JSON whatever its label, and never rendered.
    """
    if response.status_code == 401:
        raise ProviderApiError(
            f"{provider.display_name} rejected the token", provider=provider.name, status=401
        )
    if not 200 <= response.status_code < 300:
        raise answer_error(provider, response, secrets, now)
    if len(response.content) > limit:
        raise too_large(provider, limit, response.status_code)
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        raise ProviderApiError(
            f"{provider.display_name} answered something that is not JSON",
            provider=provider.name,
            status=response.status_code,
        ) from None


def read_json_object(provider: ProviderConfig, response: httpx.Response) -> dict[str, Any]:
    """`read_json`, for an answer that must be a JSON object (a profile)."""
    body = read_json(provider, response)
    if not isinstance(body, dict):
        raise ProviderApiError(
            f"{provider.display_name} answered something that is not a JSON object", provider=provider.name
        )
    return body


async def fetch_userinfo(
    http: httpx.AsyncClient, provider: ProviderConfig, access_token: str
) -> dict[str, Any]:
    """GET the provider's user endpoint with the user's token; a JSON object or ProviderApiError."""
    try:
        response = await http.get(
            provider.userinfo_url,
            headers={**auth_headers(provider, access_token), "Accept": "application/json"},
        )
    except httpx.HTTPError as exc:
        raise did_not_answer(provider, exc) from None
    return read_json_object(provider, response)

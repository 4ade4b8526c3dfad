"""Metadata discovery: candidate URLs, the exact-issuer rule, and the errors callers rely on."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.errors import MetadataError, MetadataIssuerMismatch
from service.providers.discovery import discover_metadata, fetch_metadata, metadata_urls

ISSUER = "https://as.example"


def serving(documents: dict[str, tuple[int, Any]]) -> tuple[httpx.AsyncClient, list[str]]:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        status, body = documents.get(str(request.url), (404, {}))
        return (
            httpx.Response(status, json=body)
            if not isinstance(body, bytes)
            else httpx.Response(status, content=body)
        )

    return httpx.AsyncClient(transport=httpx.MockTransport(handler)), asked


def test_candidate_urls_for_an_issuer_with_and_without_a_path() -> None:
    assert metadata_urls(ISSUER) == [
        f"{ISSUER}/.well-known/oauth-authorization-server",
        f"{ISSUER}/.well-known/openid-configuration",
    ]
    assert metadata_urls(f"{ISSUER}/tenant/") == [
        f"{ISSUER}/.well-known/oauth-authorization-server/tenant",
        f"{ISSUER}/.well-known/openid-configuration/tenant",
        f"{ISSUER}/tenant/.well-known/openid-configuration",
    ]


async def test_the_first_candidate_that_serves_the_document_wins() -> None:
    oidc = f"{ISSUER}/.well-known/openid-configuration"
    http, asked = serving({oidc: (200, {"issuer": ISSUER, "jwks_uri": f"{ISSUER}/jwks"})})
    async with http:
        metadata = await discover_metadata(http, ISSUER)
    assert metadata["jwks_uri"] == f"{ISSUER}/jwks"
    assert asked == [f"{ISSUER}/.well-known/oauth-authorization-server", oidc]


async def test_a_document_naming_another_issuer_is_refused_at_once() -> None:
    first = f"{ISSUER}/.well-known/oauth-authorization-server"
    http, asked = serving({first: (200, {"issuer": "https://evil.example"})})
    async with http:
        with pytest.raises(MetadataIssuerMismatch):
            await discover_metadata(http, ISSUER)
    assert asked == [first]  # RFC 8414 §3.3: never used, and no other candidate tried


async def test_no_document_anywhere_is_a_metadata_error() -> None:
    http, _ = serving({})
    async with http:
        with pytest.raises(MetadataError, match="no authorization server metadata"):
            await discover_metadata(http, ISSUER)


@pytest.mark.parametrize(
    ("answer", "message"),
    [((500, {}), "HTTP 500"), ((200, b"<html>"), "not JSON"), ((200, ["a"]), "not a JSON object")],
)
async def test_fetch_refuses_an_unusable_answer(answer: tuple[int, Any], message: str) -> None:
    url = "https://idp.example/.well-known/openid-configuration"
    http, _ = serving({url: answer})
    async with http:
        with pytest.raises(MetadataError, match=message):
            await fetch_metadata(http, url)


async def test_fetch_without_an_expected_issuer_takes_the_document() -> None:
    url = "https://idp.example/.well-known/openid-configuration"
    http, _ = serving({url: (200, {"issuer": "https://idp.example"})})
    async with http:
        assert await fetch_metadata(http, url) == {"issuer": "https://idp.example"}

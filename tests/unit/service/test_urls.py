"""URL rules shared by settings, providers and the transport security: loopback, TLS, origin."""

from __future__ import annotations

import pytest

from service.urls import https_unless_loopback, is_loopback, origin


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://mcp.example.com", True),
        ("http://127.0.0.1:8000", True),
        ("http://localhost:8080/x", True),
        ("http://[::1]:9000", True),
        ("http://mcp.example.com", False),
        ("http://127.0.0.1.evil.example", False),
        ("ftp://127.0.0.1", False),
        ("https://", False),
        ("mcp.example.com", False),
    ],
)
def test_https_unless_loopback(url: str, ok: bool) -> None:
    assert https_unless_loopback(url) is ok


def test_loopback_and_origin() -> None:
    assert is_loopback("http://localhost:1") and not is_loopback("https://example.com")
    assert origin("https://api.example.com:8443/v1/user?x=1") == "https://api.example.com:8443"
    assert origin("/relative/path") == ""

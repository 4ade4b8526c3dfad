"""service/urls.py: the URL rules shared by settings, providers and the transport security (loopback, TLS,
origin), and this server's paths as routes, links and templates use them."""

from __future__ import annotations

import pytest

from service.urls import (
    CALLBACK_PATH,
    CONNECT_PATH,
    callback_path,
    connect_link,
    https_unless_loopback,
    is_connect_link,
    is_loopback,
    is_mcp_path,
    origin,
)


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


def test_the_connect_link_carries_only_the_elicitation_id() -> None:
    link = connect_link("abcdefghijklmnop_-12")
    assert link == f"{CONNECT_PATH}?elicitationId=abcdefghijklmnop_-12"
    assert is_connect_link(link)
    assert not is_connect_link(CONNECT_PATH + "ions") and not is_connect_link(CONNECT_PATH)


def test_the_callback_path_names_its_provider() -> None:
    assert callback_path("mockhub") == "/callback/mockhub"
    assert CALLBACK_PATH.format(provider="x") == callback_path("x")


def test_the_mcp_path_and_below() -> None:
    assert is_mcp_path("/mcp") and is_mcp_path("/mcp/x")
    assert not is_mcp_path("/mcpx") and not is_mcp_path("/")

"""This server's paths, as service/urls.py defines them for routes, links and templates."""

from __future__ import annotations

from service.urls import (
    CALLBACK_PATH,
    CONNECT_PATH,
    callback_path,
    connect_link,
    is_connect_link,
    is_mcp_path,
)


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

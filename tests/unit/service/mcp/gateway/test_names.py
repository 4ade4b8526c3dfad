"""Remote MCP servers' namespaces: a name routes to exactly one owner."""

from __future__ import annotations

import pytest

from service.mcp.gateway.names import Namespaces, ShadowedToolName, require_unshadowed_tool_names
from service.providers.catalogue import ProviderConfig


def downstream(name: str, prefix: str = "") -> ProviderConfig:
    return ProviderConfig(name=name, kind="mcp", url=f"https://{name}.example/mcp", tool_prefix=prefix)


def test_separate_namespaces_and_our_tools_outside_them_pass() -> None:
    require_unshadowed_tool_names({"linear": "linear", "github": "gh"}, ["whoami", "list_connections", "lin"])


@pytest.mark.parametrize(
    "prefixes",
    [
        {"a": "git", "b": "git_hub"},  # git_hub_x: git's hub_x or git_hub's x?
        {"a": "x", "b": "x_y", "c": "z"},
    ],
)
def test_overlapping_namespaces_are_refused(prefixes: dict[str, str]) -> None:
    with pytest.raises(ShadowedToolName, match="tool_prefix"):
        require_unshadowed_tool_names(prefixes, [])


def test_a_tool_of_ours_inside_a_namespace_is_refused() -> None:
    with pytest.raises(ShadowedToolName, match="'linear_search'"):
        require_unshadowed_tool_names({"linear": "linear"}, ["whoami", "linear_search"])


def test_routes_and_names() -> None:
    spaces = Namespaces(
        [
            downstream("linear"),
            downstream("github", "gh"),
            ProviderConfig(
                name="mockhub",
                client_id="x",
                client_secret="y",
                authorize_url="https://h.example/a",
                token_url="https://h.example/t",
                userinfo_url="https://h.example/u",
            ),
        ]
    )
    assert spaces.prefixes == {"linear": "linear", "github": "gh"}
    route = spaces.route("gh_create_issue")
    assert route is not None and route.provider.name == "github" and route.tool == "create_issue"
    assert (
        spaces.route("linear_") is None
        and spaces.route("whoami") is None
        and spaces.route("mockhub_x") is None
    )
    assert Namespaces.ours(downstream("linear"), "a.b-c_d") == "linear_a.b-c_d"
    for bad in ("", "has space", "x" * 128, "é"):
        assert Namespaces.ours(downstream("linear"), bad) is None
    assert not Namespaces([])

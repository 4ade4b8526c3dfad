"""Tool packages: references and entry points are loaded, and every way one can be wrong is a
one-line configuration error naming it, raised before the server serves anything."""

from __future__ import annotations

import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer

from mock_providers.demo import build_demo
from service.app import build_mcp_server
from service.mcp.tool_packages import (
    ENTRY_POINT_GROUP,
    ToolPackage,
    ToolPackageError,
    load_entry_point,
    load_reference,
    load_tool_packages,
    once_each,
    register_tool_packages,
)
from service.runtime import Runtime
from service.settings import SettingsError, load_settings

TOOLS_MODULE = """
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_url_connect import ConnectionBroker, ProviderSession, uses


def register(server: MCPServer[Any], broker: ConnectionBroker) -> None:
    @server.tool(description="The caller's MockHub login.")
    @uses(broker.session, "mockhub", scopes=("read:user",))
    async def {name}_login(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
        return {{"login": (await api.get_json(api.provider.userinfo_url))["login"]}}


NOT_A_FUNCTION = 42


def failing(server: Any, broker: Any) -> None:
    raise RuntimeError("no API key for\\nthe tracker")


def shadowing(server: MCPServer[Any], broker: ConnectionBroker) -> None:
    @server.tool(description="Another whoami.")
    async def whoami() -> str:
        return "not ours"
"""


@pytest.fixture
def tool_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Importable modules `acme_tools` and `beta_tools` (same content, other tool names), and
    `broken_tools`, which fails on import."""
    site = tmp_path / "site"
    for name in ("acme", "beta"):
        package = site / f"{name}_tools"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(textwrap.dedent(TOOLS_MODULE.format(name=name)))
    (site / "broken_tools.py").write_text("raise ImportError('needs the acme SDK,\\n version 3')\n")
    monkeypatch.syspath_prepend(str(site))
    return site


def entry_point(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


# -- references ---------------------------------------------------------------------------------


def test_a_reference_names_a_function_in_a_module(tool_modules: Path) -> None:
    package = load_reference("acme_tools:register", "MCPUC_TOOLS 'acme_tools:register'")
    assert package.register.__module__ == "acme_tools"
    assert package.register.__name__ == "register"


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("acme_tools", "is not of the form package.module:function"),
        ("acme_tools:", "is not of the form package.module:function"),
        ("acme tools:register", "is not of the form package.module:function"),
        ("acme_tools:register:again", "is not of the form package.module:function"),
        ("missing_tools:register", "cannot import 'missing_tools': ModuleNotFoundError"),
        ("broken_tools:register", "cannot import 'broken_tools': ImportError: needs the acme SDK, version 3"),
        ("acme_tools:absent", "'acme_tools' has no attribute 'absent'"),
        ("acme_tools:NOT_A_FUNCTION", "'acme_tools:NOT_A_FUNCTION' is not callable"),
    ],
)
def test_a_reference_that_cannot_be_loaded_is_one_line_naming_it(
    tool_modules: Path, reference: str, message: str
) -> None:
    with pytest.raises(ToolPackageError) as raised:
        load_tool_packages([reference], installed=[])
    text = str(raised.value)
    assert text.startswith(f"MCPUC_TOOLS {reference!r}: ")
    assert message in text
    assert "\n" not in text
    assert isinstance(raised.value, SettingsError)  # the CLI's configuration-error path


# -- entry points -------------------------------------------------------------------------------


def test_entry_points_follow_the_setting_in_name_order_and_each_loads_once(tool_modules: Path) -> None:
    installed = [
        entry_point("zeta", "beta_tools:register"),
        entry_point("alpha", "acme_tools:register"),
    ]
    packages = load_tool_packages(["acme_tools:register"], installed=installed)
    assert [p.source for p in packages] == [
        "MCPUC_TOOLS 'acme_tools:register'",
        f"entry point 'zeta' (beta_tools:register) of group {ENTRY_POINT_GROUP}",
    ]


def test_a_function_named_two_ways_registers_once(tool_modules: Path) -> None:
    """`acme_tools:register` and the same function reached through an alias module are one package."""
    (tool_modules / "acme_alias.py").write_text("from acme_tools import register as setup\n")
    installed = [entry_point("acme", "acme_alias:setup")]
    packages = load_tool_packages(["acme_tools:register"], installed=installed)
    assert [p.source for p in packages] == ["MCPUC_TOOLS 'acme_tools:register'"]
    direct = load_reference("acme_tools:register", "x")
    assert once_each([direct, ToolPackage("y", direct.register), *packages]) == [direct]


def test_without_entry_points_only_the_setting_is_loaded(tool_modules: Path) -> None:
    installed = [entry_point("beta", "beta_tools:register")]
    packages = load_tool_packages(["acme_tools:register"], installed=installed, entry_points_too=False)
    assert [p.source for p in packages] == ["MCPUC_TOOLS 'acme_tools:register'"]
    assert load_settings({"MCPUC_TOOL_ENTRY_POINTS": "false"}).tool_entry_points is False


def test_an_entry_point_is_found_by_its_name(tool_modules: Path) -> None:
    installed = [entry_point("beta", "beta_tools:register")]
    package = load_entry_point("beta", "mcpuc_tools 'beta'", installed=installed)
    assert package.register.__module__ == "beta_tools"
    with pytest.raises(ToolPackageError) as missing:
        load_entry_point("gamma", "mcpuc_tools 'gamma'", installed=installed)
    assert str(missing.value) == (
        f"mcpuc_tools 'gamma': no installed tool package has the entry point 'gamma' (group "
        f"{ENTRY_POINT_GROUP}; installed: beta)"
    )


def test_a_broken_entry_point_is_named_by_its_distribution_entry(tool_modules: Path) -> None:
    with pytest.raises(ToolPackageError, match=r"^entry point 'acme' \(acme_tools:absent\) of group"):
        load_tool_packages([], installed=[entry_point("acme", "acme_tools:absent")])


def test_the_installed_example_package_is_found_by_its_entry_point() -> None:
    sources = [p.source for p in load_tool_packages([])]
    assert (
        f"entry point 'provider-tools' (mcpuc_provider_tools:register) of group {ENTRY_POINT_GROUP}"
        in sources
    )


def test_the_setting_is_read_comma_separated_from_the_environment() -> None:
    settings = load_settings({"MCPUC_TOOLS": " acme_tools:register,beta_tools.sub:make ,"})
    assert settings.tools == ("acme_tools:register", "beta_tools.sub:make")


# -- registering --------------------------------------------------------------------------------


@pytest.fixture
def server_parts(tmp_path: Path) -> tuple[MCPServer[Any], Any]:
    """An MCP server with our own tools and its broker, as create_app builds them."""
    demo = build_demo("127.0.0.1", 9100, 9101, tmp_path / "data")
    return build_mcp_server(demo.settings, Runtime(demo.settings))


async def test_a_package_adds_its_tools_beside_ours(
    tool_modules: Path, server_parts: tuple[MCPServer[Any], Any]
) -> None:
    server, broker = server_parts
    register_tool_packages(load_tool_packages(["acme_tools:register"], installed=[]), server, broker)
    names = {tool.name for tool in await server.list_tools()}
    assert {"whoami", "list_connections", "disconnect", "acme_login"} <= names


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("acme_tools:failing", "register failed: RuntimeError: no API key for the tracker"),
        ("acme_tools:shadowing", "register failed: ValueError: a tool named 'whoami' is already registered"),
    ],
)
def test_a_package_that_fails_to_register_is_named(
    tool_modules: Path, server_parts: tuple[MCPServer[Any], Any], reference: str, message: str
) -> None:
    server, broker = server_parts
    with pytest.raises(ToolPackageError) as raised:
        register_tool_packages(load_tool_packages([reference], installed=[]), server, broker)
    assert str(raised.value) == f"MCPUC_TOOLS {reference!r}: {message}"


def test_two_packages_registering_one_tool_name_is_refused(
    tool_modules: Path, server_parts: tuple[MCPServer[Any], Any]
) -> None:
    server, broker = server_parts
    acme = load_reference("acme_tools:register", "first")
    again = ToolPackage("second", acme.register)
    with pytest.raises(ToolPackageError, match=r"^second: register failed: .*'acme_login' is already"):
        register_tool_packages([acme, again], server, broker)

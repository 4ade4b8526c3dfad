"""Tool packages: an operator's own tools, served by this server without editing it.

A tool package is any importable module with a function `register(server, broker)` that adds
tools to the SDK server, usually with `@uses(broker.session, provider, scopes=...)`: exactly what
the testing kit's `mcpuc_tools` returns. The server finds them in two places, in this order:

- the setting `tools` (`MCPUC_TOOLS="acme_tools.github:register, other.module:register"`);
- the entry-point group `mcp_url_connect.tools` of every installed distribution
  (`[project.entry-points."mcp_url_connect.tools"]` in the package's pyproject.toml), in the
  order of the entry points' names.

A reference that cannot be imported, does not name a function, or fails while registering stops
the server at start with one line naming it (`ToolPackageError`), never a half-equipped server.
docs/tools.md walks through a package from pyproject.toml to a running server.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from service.settings import SettingsError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from service.mcp.broker import ConnectionBroker

ENTRY_POINT_GROUP = "mcp_url_connect.tools"
logger = logging.getLogger(__name__)

#: What a tool package provides: `register(server, broker)`, called once before the server starts.
RegisterTools = Callable[["MCPServer[Any]", "ConnectionBroker"], None]

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
REFERENCE = re.compile(rf"(?P<module>{_DOTTED}):(?P<attribute>{_DOTTED})")


class ToolPackageError(SettingsError):
    """A tool package that cannot be loaded or registered; the message names it, on one line."""


@dataclass(frozen=True)
class ToolPackage:
    """One `register` function and where it came from (for messages and the start-up log)."""

    source: str  # "MCPUC_TOOLS acme_tools:register" or "entry point acme (acme_tools:register)"
    register: RegisterTools


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def load_reference(reference: str, source: str) -> ToolPackage:
    """Import `package.module:function` and check that it names a function."""
    match = REFERENCE.fullmatch(reference.strip())
    if match is None:
        raise ToolPackageError(f"{source}: {reference!r} is not of the form package.module:function")
    try:
        target: Any = importlib.import_module(match["module"])
    except Exception as exc:  # an import runs arbitrary code: any failure is a configuration error
        raise ToolPackageError(f"{source}: cannot import {match['module']!r}: {_one_line(exc)}") from None
    for name in match["attribute"].split("."):
        try:
            target = getattr(target, name)
        except AttributeError:
            raise ToolPackageError(
                f"{source}: {match['module']!r} has no attribute {match['attribute']!r}"
            ) from None
    if not callable(target):
        raise ToolPackageError(f"{source}: {reference!r} is not callable")
    return ToolPackage(source, target)


def _load_entry_point(point: EntryPoint) -> ToolPackage:
    source = f"entry point {point.name!r} ({point.value}) of group {ENTRY_POINT_GROUP}"
    return load_reference(point.value, source)


def load_entry_point(name: str, source: str, installed: Iterable[EntryPoint] | None = None) -> ToolPackage:
    """The installed tool package whose entry point is called `name` (`installed` for tests)."""
    points = {p.name: p for p in (entry_points(group=ENTRY_POINT_GROUP) if installed is None else installed)}
    if name not in points:
        known = ", ".join(sorted(points)) or "none"
        raise ToolPackageError(
            f"{source}: no installed tool package has the entry point {name!r} (group "
            f"{ENTRY_POINT_GROUP}; installed: {known})"
        )
    return _load_entry_point(points[name])


def once_each(packages: Iterable[ToolPackage]) -> list[ToolPackage]:
    """`packages` without repeats of the same `register` function, however each was named (a
    reference, an entry point, the function itself): the first one stays."""
    seen: set[int] = set()
    unique = []
    for package in packages:
        if id(package.register) not in seen:
            seen.add(id(package.register))
            unique.append(package)
    return unique


def load_tool_packages(
    references: Sequence[str], installed: Iterable[EntryPoint] | None = None, *, entry_points_too: bool = True
) -> list[ToolPackage]:
    """The setting's references, then (unless `entry_points_too` is false) the installed entry
    points in the order of their names (`installed` for tests); a function named both ways is
    loaded once."""
    packages = [load_reference(ref, f"MCPUC_TOOLS {ref!r}") for ref in references]
    if entry_points_too:
        points = entry_points(group=ENTRY_POINT_GROUP) if installed is None else installed
        packages += [_load_entry_point(point) for point in sorted(points, key=lambda p: p.name)]
    return once_each(packages)


def register_tool_packages(
    packages: Iterable[ToolPackage], server: MCPServer[Any], broker: ConnectionBroker
) -> None:
    """Call each package's `register`; a failure names the package that raised it."""
    for package in packages:
        try:
            package.register(server, broker)
        except Exception as exc:  # the package's own code: report which one, on one line
            raise ToolPackageError(f"{package.source}: register failed: {_one_line(exc)}") from None
        logger.info("tool package registered: %s", package.source)

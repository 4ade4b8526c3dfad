"""The names of remote MCP servers' tools here: `<prefix>_<tool>`, in a namespace of their own.

Each remote MCP server (`kind = "mcp"`) owns every name that starts with its prefix and `_`. With
prefixes that never overlap and none of our own tools inside them, a downstream's tool name can
only land in its own namespace: it cannot shadow one of ours or another downstream's, whatever it
is called (`require_unshadowed_tool_names` holds this at start).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from service.providers.catalogue import ProviderConfig

# 2025-11-25 server/tools "Tool names": 1-128 characters of A-Z a-z 0-9 _ - . (SEP-986).
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # used with fullmatch
CONNECT_TOOL = "connect"  # `<prefix>_connect`: what a user who is not connected yet sees


class ShadowedToolName(ValueError):
    """Two namespaces overlap, or a tool of ours lies inside a downstream's namespace."""


def require_unshadowed_tool_names(prefixes: Mapping[str, str], own_tools: Iterable[str]) -> None:
    """No two remote MCP servers' namespaces overlap (`a_` is not the start of `a_b_`), and no
    tool of ours (nor a tool package's) starts with a namespace: a name then routes to exactly
    one owner. The MCP spec's tool-name guidance (2025-11-25 server/tools, "Tool names": names
    SHOULD be unique within a server) made a rule a downstream cannot break."""
    spaces = sorted((f"{prefix}_", provider) for provider, prefix in prefixes.items())
    for (space, provider), (other, other_provider) in itertools.pairwise(spaces):
        # mutant: gateway.unshadowed_tool_names
        if other.startswith(space):
            raise ShadowedToolName(
                f"providers.{other_provider}.tool_prefix: its tools' names would start like those of "
                f"providers.{provider} ({space}...): choose prefixes that do not begin alike"
            )
    for tool in own_tools:
        for space, provider in spaces:
            # mutant: gateway.unshadowed_tool_names
            if tool.startswith(space):
                raise ShadowedToolName(
                    f"the tool {tool!r} lies inside providers.{provider}'s namespace ({space}...): "
                    "rename the tool or choose another tool_prefix"
                )


@dataclass(frozen=True)
class Route:
    """Where a name of ours leads: a remote MCP server and its tool's own name."""

    provider: ProviderConfig
    tool: str


class Namespaces:
    """Each remote MCP server's namespace, to route a name and to name a downstream's tool."""

    def __init__(self, providers: Iterable[ProviderConfig]) -> None:
        self._by_space = {f"{p.prefix}_": p for p in providers if p.kind == "mcp"}

    def __bool__(self) -> bool:
        return bool(self._by_space)

    @property
    def prefixes(self) -> dict[str, str]:
        return {p.name: p.prefix for p in self._by_space.values()}

    @property
    def providers(self) -> list[ProviderConfig]:
        return list(self._by_space.values())

    def route(self, name: str) -> Route | None:
        """The downstream tool `name` calls, or None when no namespace holds it."""
        for space, provider in self._by_space.items():
            if name.startswith(space) and len(name) > len(space):
                return Route(provider, name[len(space) :])
        return None

    @staticmethod
    def ours(provider: ProviderConfig, tool: str) -> str | None:
        """Our name for a downstream's tool, or None when it would not be a valid tool name."""
        name = f"{provider.prefix}_{tool}"
        return name if tool and TOOL_NAME.fullmatch(name) else None

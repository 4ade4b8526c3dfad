"""The tool packages a test asks the kit for (what `mcpuc_tools` returns), and only those.

A test names each package by its `register` function, by an installed distribution's entry-point
name (`"provider-tools"`) or by reference (`"acme_tools:register"`). The kit's server loads no
entry point on its own (`tool_entry_points = false`), so another installed package's tools never
come along, and a package named twice, in any of these ways, registers once
(`service.mcp.tool_packages.once_each`).
"""

from __future__ import annotations

from collections.abc import Sequence

from service.mcp.tool_packages import (
    RegisterTools,
    ToolPackage,
    load_entry_point,
    load_reference,
    once_each,
)

#: What `mcpuc_tools` (or `Mcpuc(tools=...)`) takes: one package or several, each a `register`
#: function, an entry-point name or a `package.module:function` reference; `None` for none.
Tools = RegisterTools | str | Sequence[RegisterTools | str] | None


def tool_packages(tools: Tools) -> list[ToolPackage]:
    """The packages `tools` names, each once, in order; `ToolPackageError` names one that does not load."""
    if tools is None:
        return []
    items = [tools] if isinstance(tools, str) or callable(tools) else list(tools)
    packages = []
    for item in items:
        if not isinstance(item, str):
            name = f"{getattr(item, '__module__', '?')}:{getattr(item, '__qualname__', repr(item))}"
            packages.append(ToolPackage(f"mcpuc_tools {name}", item))
        elif ":" in item:
            packages.append(load_reference(item, f"mcpuc_tools {item!r}"))
        else:
            packages.append(load_entry_point(item, f"mcpuc_tools {item!r}"))
    return once_each(packages)

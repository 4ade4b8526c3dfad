"""The public API (`mcp_url_connect`, `mcp_url_connect.testing`) is all that docs/ and examples/
import of ours, every name it exports is documented in docs/api.md, and it is typed (PEP 561)."""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import mcp_url_connect
import mcp_url_connect.fastmcp
import mcp_url_connect.testing

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = {
    "mcp_url_connect": mcp_url_connect,
    "mcp_url_connect.fastmcp": mcp_url_connect.fastmcp,
    "mcp_url_connect.testing": mcp_url_connect.testing,
}
OURS = ("service", "connect_routes", "token_store", "mock_providers", "mcp_url_connect")
CODE_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def sources() -> Iterator[tuple[str, str]]:
    """(where, Python source) for every example file and every Python block of the docs."""
    for path in sorted((ROOT / "examples").rglob("*.py")):
        yield str(path.relative_to(ROOT)), path.read_text()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, block in enumerate(CODE_BLOCK.findall(path.read_text()), start=1):
            yield f"{path.relative_to(ROOT)} block {number}", block


def imports_of_ours(source: str) -> Iterator[tuple[str, list[str]]]:
    """(module, names) for each import of one of our packages. A sketch that is not valid Python
    (some docs blocks elide arguments) is read by its import lines alone."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        lines = [line for line in source.splitlines() if line.startswith(("from ", "import "))]
        tree = ast.parse("\n".join(lines))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in OURS:
                yield node.module, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in OURS:
                    yield alias.name, []


def test_docs_and_examples_import_only_the_public_api() -> None:
    found = [
        f"{where}: {module}.{name}" if name else f"{where}: {module}"
        for where, source in sources()
        for module, names in imports_of_ours(source)
        for name in names or [""]
        if module not in PUBLIC or (name and name not in PUBLIC[module].__all__)
    ]
    assert found == [], "import these from mcp_url_connect (docs/api.md) instead"


def test_the_scan_sees_docs_and_examples() -> None:
    """The test above would pass on nothing: check it reads what it should."""
    seen = {where.split(" ")[0] for where, _ in sources()}
    assert {"examples/embed_sdk.py", "docs/tools.md", "docs/testing.md"} <= seen
    assert any(
        module == "mcp_url_connect" for _, source in sources() for module, _ in imports_of_ours(source)
    )


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_exported_name_exists_and_is_documented(module: str) -> None:
    documented = (ROOT / "docs" / "api.md").read_text()
    for name in PUBLIC[module].__all__:
        assert getattr(importlib.import_module(module), name) is not None
        assert f"`{name}`" in documented, f"{module}.{name} is not in docs/api.md"


def test_every_package_is_typed() -> None:
    for package in (*OURS, "examples/provider_tools/mcpuc_provider_tools"):
        assert (ROOT / package / "py.typed").is_file(), package

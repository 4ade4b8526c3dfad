"""Docs that run: every Python block of docs/tools.md, docs/testing.md, docs/embedding.md and
docs/api.md is a complete module (its imports included, no `...` standing for code) and is run.
A block of tests runs under pytest with the kit; a block that defines tools or a server is
served by the kit and each of its tools called through the connect flow: a tool package by its
`register(server, broker)`, a server of your own by its `build_app(settings)`."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mcp_url_connect.testing import Mcpuc

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("docs/tools.md", "docs/testing.md", "docs/embedding.md", "docs/api.md")
BLOCK = re.compile(r"(?:<!-- example: (?P<example>\S+) -->\n)?```python\n(?P<code>.*?)```\n", re.S)
OUR_TOOLS = frozenset({"whoami", "list_connections", "disconnect"})
# What each tool a snippet defines is called with (a new tool in the docs needs a line here).
EXERCISE: dict[str, dict[str, Any]] = {
    "my_issues": {},
    "my_repos": {"limit": 150},
    "open_issue": {"repo": "octocat/repo-001", "title": "Opened by the docs"},
    "hub_login": {},
}
DEFINES_TOOLS = re.compile(r"@\w+\.tool\(|\bMCPServer\(|\bFastMCP\(")


@dataclass(frozen=True)
class Snippet:
    doc: str
    line: int
    code: str
    example: str | None  # the file the block must be, byte for byte

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def tests(self) -> bool:
        tree = ast.parse(self.code)
        return any(
            isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef) and n.name.startswith("test_")
            for n in tree.body
        )


def snippets() -> list[Snippet]:
    found = []
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for match in BLOCK.finditer(text):
            line = text[: match.start("code")].count("\n")
            found.append(Snippet(doc, line, match["code"], match["example"]))
    return found


SNIPPETS = snippets()


def load(snippet: Snippet, where: Path) -> ModuleType:
    path = where / f"snippet_{snippet.line}.py"
    path.write_text(snippet.code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the module's annotations through it
    spec.loader.exec_module(module)
    return module


def run_pytest(path: Path) -> subprocess.CompletedProcess[str]:
    """pytest in a child process, with the kit's plugin (by its entry point once installed)."""
    installed = any(ep.value == "mock_providers.testing.plugin" for ep in entry_points(group="pytest11"))
    plugin = [] if installed else ["-p", "mock_providers.testing.plugin"]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, str(path)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


async def exercise(stack: Mcpuc) -> dict[str, Any]:
    """Call each tool the snippet added (not ours) as a new user would: the first call asks to
    connect, the user approves, the retry answers. Returns each tool's structured result."""
    stack.start()
    results = {}
    try:
        async with stack.client("lister") as client:
            added = {tool.name for tool in (await client.list_tools()).tools} - OUR_TOOLS
        assert added, "the snippet added no tool"
        for tool in sorted(added):
            assert tool in EXERCISE, f"add the tool {tool!r} to EXERCISE: how the docs test calls it"
            user = f"docs-{tool}"
            async with stack.client(user) as client:
                link = await stack.connect_url(client, tool, EXERCISE[tool])
                await stack.browser(user).approve(link.url, login="octocat")
                result = await stack.retry(client, link, tool, EXERCISE[tool])
            assert not result.is_error, f"{tool}: {result}"
            results[tool] = result.structured_content
    finally:
        stack.stop()
    return results


def test_the_docs_have_their_snippets() -> None:
    count = {doc: sum(1 for s in SNIPPETS if s.doc == doc) for doc in DOCS}
    assert count["docs/tools.md"] >= 2 and count["docs/testing.md"] >= 2 and count["docs/embedding.md"] >= 2


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: s.id)
def test_a_snippet_is_complete(snippet: Snippet, tmp_path: Path) -> None:
    """Its names are all imported or defined (pyflakes, through ruff), and no `...` stands in for
    an argument or a value."""
    path = tmp_path / "snippet.py"
    path.write_text(snippet.code)
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", "--select", "F", str(path)],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout
    bodies = {
        id(node.body[0].value)
        for node in ast.walk(ast.parse(snippet.code))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and isinstance(node.body[0], ast.Expr)
    }
    placeholders = [
        node.lineno
        for node in ast.walk(ast.parse(snippet.code))
        if isinstance(node, ast.Constant) and node.value is Ellipsis and id(node) not in bodies
    ]
    assert placeholders == [], f"`...` on lines {placeholders}"
    if snippet.example is not None:
        assert snippet.code == (ROOT / snippet.example).read_text(), f"{snippet.example} is not the block"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: s.id)
async def test_a_snippet_runs(snippet: Snippet, tmp_path: Path) -> None:
    if snippet.tests:
        path = ROOT / snippet.example if snippet.example else tmp_path / f"test_snippet_{snippet.line}.py"
        if snippet.example is None:
            path.write_text(snippet.code)
        result = run_pytest(path)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        assert re.search(r"\b\d+ passed\b", result.stdout) and " failed" not in result.stdout
        return
    module = load(snippet, tmp_path)
    if hasattr(module, "register"):
        results = await exercise(Mcpuc(tmp_path / "data", tools=module.register))
    elif hasattr(module, "build_app"):
        results = await exercise(Mcpuc(tmp_path / "data", app=module.build_app))
    else:
        assert not DEFINES_TOOLS.search(snippet.code), (
            "a snippet with tools or a server defines register(server, broker) or build_app(settings), "
            "so that this test can serve it"
        )
        return
    assert all(isinstance(value, dict) for value in results.values())

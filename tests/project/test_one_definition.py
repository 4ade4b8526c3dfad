"""One definition per rule: each rule below is spelled in production code only in its one file.

Everything else imports the definition. The scan reads the code's literals (comments and
docstrings are prose, not definitions), the names its constants are assigned to, and the
templates' markup. A rule whose `home` is None is defined outside this repository (the SDK,
`mcp_types`): no file of ours may spell it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("service", "connect_routes", "token_store", "mcp_url_connect")
TEMPLATES = "connect_routes/templates"


@dataclass(frozen=True)
class Rule:
    name: str
    home: str | None  # the one file allowed to spell it (None: only a library does)
    literal: re.Pattern[str] | None = None  # searched in each string literal
    numbers: frozenset[int] = frozenset()  # integer literals
    constant: re.Pattern[str] | None = None  # a name assigned a literal value (`NAME = 8`)
    markup: re.Pattern[str] | None = None  # searched in each line of each template


PAGES = r"(connect|callback|connections|login|logout)"
COLUMN = r"(c\.)?(account_label|blob|connected_at|updated_at|status|refreshed_at)"

RULES = (
    # The SDK's MCP_SESSION_ID_HEADER.
    Rule("session header", None, literal=re.compile(r"(?i)^mcp-session-id$")),
    Rule("MCP path", "service/urls.py", literal=re.compile(r"^/mcp(/|\?|$)")),
    Rule(
        "browser paths",  # /connect, /callback/<provider>, /connections, /login, /logout and below
        "service/urls.py",
        literal=re.compile(rf"^/{PAGES}(/|\?|$)"),
        markup=re.compile(rf"""(action|formaction|href)=["']/{PAGES}\b"""),
    ),
    Rule(
        "API-key bounds",
        "service/flow/connect.py",
        literal=re.compile(r"\\x21-\\x7e\]\{\d"),  # the key's pattern with numbers in it
        constant=re.compile(r"API_KEY.*(LENGTH|MIN|MAX)|(MIN|MAX).*API_KEY"),
        markup=re.compile(r"""(minlength|maxlength)=["']\d"""),
    ),
    Rule("Redis key prefix", "token_store/backends/redis/store.py", literal=re.compile(r"^mcpuc:$")),
    # JSON-RPC 2.0 §5.1's codes and MCP's URL elicitation required: `mcp_types` names each.
    Rule("JSON-RPC error codes", None, numbers=frozenset({-32700, -32600, -32601, -32602, -32603, -32042})),
    Rule(
        "issuer metadata URLs",
        "service/providers/discovery.py",
        literal=re.compile(r"/\.well-known/(oauth-authorization-server|openid-configuration)"),
    ),
    Rule(
        "connection columns",
        "token_store/codec.py",
        literal=re.compile(rf"{COLUMN}\s*,\s*{COLUMN}"),  # a column list in SQL
        constant=re.compile(r"(CONNECTION|ROW|READ)_COLUMNS"),  # a list of column names
    ),
    # The browser session cookie's own keys ("user", "csrf" and "next" are too common a word to scan).
    Rule(
        "browser session keys",
        "service/flow/browser_session.py",
        literal=re.compile(r"^(login_at|bid|login_purpose|flash_disconnected)$"),
    ),
)


def production_files() -> Iterator[Path]:
    for folder in SCANNED:
        yield from sorted((ROOT / folder).rglob("*.py"))


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants: prose, which may name a path or a header."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def holds_a_value(node: ast.AST) -> bool:
    """True when an assigned value spells something itself (a number, a word), rather than
    naming or joining what is defined elsewhere."""
    return any(
        isinstance(each, ast.Constant)
        and (isinstance(each.value, int) or (isinstance(each.value, str) and each.value.isidentifier()))
        for each in ast.walk(node)
    )


@dataclass(frozen=True)
class Spelling:
    where: str  # file:line
    literal: str | None = None
    number: int | None = None
    constant: str | None = None

    def breaks(self, rule: Rule) -> bool:
        if self.literal is not None and rule.literal is not None:
            return rule.literal.search(self.literal) is not None
        if self.number is not None:
            return self.number in rule.numbers
        if self.constant is not None and rule.constant is not None:
            return rule.constant.search(self.constant) is not None
        return False


def spellings(path: Path) -> Iterator[Spelling]:
    """The string and bytes literals outside docstrings, the negative integers, and the names
    assigned a value spelled out, of one module."""
    tree = ast.parse(path.read_text(), str(path))
    prose = docstrings(tree)
    name = path.relative_to(ROOT).as_posix()
    for node in ast.walk(tree):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes) and id(node) not in prose:
            text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
            yield Spelling(where, literal=text)  # b"mcp-session-id" is how ASGI spells a header
        elif (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and isinstance(node.operand.value, int)
        ):
            yield Spelling(where, number=-node.operand.value)
        elif (
            isinstance(node, ast.Assign | ast.AnnAssign)
            and node.value is not None
            and holds_a_value(node.value)
        ):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for each in ast.walk(target):
                    if isinstance(each, ast.Name):
                        yield Spelling(where, constant=each.id)


def second_definitions() -> list[str]:
    """`rule: file:line what` for each spelling of a rule outside its home."""
    found = []
    for path in production_files():
        for spelling in spellings(path):
            for rule in RULES:
                if spelling.breaks(rule) and not spelling.where.startswith(f"{rule.home}:"):
                    what = spelling.literal or spelling.number or spelling.constant
                    found.append(f"{rule.name}: {spelling.where} {what!r}")
    for path in sorted((ROOT / TEMPLATES).glob("*.html")):
        where = path.relative_to(ROOT).as_posix()
        for line, text in enumerate(path.read_text().splitlines(), 1):
            for rule in RULES:
                if rule.markup is not None and rule.markup.search(text):
                    found.append(f"{rule.name}: {where}:{line} {text.strip()!r}")
    return found


def test_each_rule_is_defined_once() -> None:
    assert second_definitions() == []


@pytest.mark.parametrize("rule", [r for r in RULES if r.home is not None], ids=lambda r: r.name)
def test_each_home_holds_its_definition(rule: Rule) -> None:
    """The scan sees each definition where it is, so a rule whose home moved is not silently
    left unchecked."""
    assert any(spelling.breaks(rule) for spelling in spellings(ROOT / str(rule.home)))


def test_a_second_definition_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan can fail: one copy of each kind of spelling, in a module of its own."""
    copy = tmp_path / "service" / "copy.py"
    copy.parent.mkdir()
    copy.write_text(
        '"""A docstring may say /connect and mcp-session-id."""\n'
        'HEADER = b"mcp-session-id"\n'
        "CODE = -32602\n"
        "MAX_API_KEY = 4096\n"
        'CALLBACK = f"/callback/{1}"\n'
    )
    template = tmp_path / TEMPLATES / "copy.html"
    template.parent.mkdir(parents=True)
    template.write_text('<form action="/connect/cancel"><input minlength="8"></form>\n')
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    found = second_definitions()
    assert sorted(f.split(":")[0] for f in found) == [
        "API-key bounds",  # MAX_API_KEY
        "API-key bounds",  # minlength
        "JSON-RPC error codes",
        "browser paths",  # the f-string's literal part
        "browser paths",  # the form's action
        "session header",
    ], found

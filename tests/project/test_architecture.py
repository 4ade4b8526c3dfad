"""The dependency direction docs/architecture.md states, checked on every module's imports.

- `token_store` depends on nothing of ours;
- `connect_routes` may use `service` and `token_store`; `service` uses `connect_routes` only in
  its composition roots (`service/app.py`, and `service/embedding.py` for servers of others);
- production packages never import `mock_providers` at module level (the CLI's development
  commands import it inside the command);
- `bench/` and `scripts/` import nothing from `tests/`; no test module imports another test module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_level_imports(path: Path) -> Iterator[str]:
    """Top-level package names imported at module level (not inside functions)."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def all_imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def files(package: str) -> list[Path]:
    """Our Python files under `package` (not the npm packages tests/integration installs)."""
    return sorted(p for p in (ROOT / package).rglob("*.py") if "node_modules" not in p.parts)


def offending(paths: list[Path], forbidden: tuple[str, ...], *, module_level: bool = True) -> list[str]:
    found = []
    for path in paths:
        names = module_level_imports(path) if module_level else all_imports(path)
        found += [
            f"{path.relative_to(ROOT)} imports {name}"
            for name in names
            if name.split(".")[0] in forbidden or name.startswith(forbidden)
        ]
    return found


def test_token_store_depends_on_nothing_of_ours() -> None:
    forbidden = ("service", "connect_routes", "mock_providers")
    assert offending(files("token_store"), forbidden, module_level=False) == []


def test_service_uses_connect_routes_only_in_its_composition_roots() -> None:
    modules = [p for p in files("service") if p.name not in ("app.py", "embedding.py")]
    assert offending(modules, ("connect_routes",), module_level=False) == []


def test_production_packages_never_import_the_mock_providers_at_module_level() -> None:
    production = files("service") + files("connect_routes") + files("token_store")
    assert offending(production, ("mock_providers",)) == []


def test_bench_and_scripts_import_nothing_from_tests() -> None:
    assert offending(files("bench") + files("scripts"), ("tests",), module_level=False) == []


def test_no_test_module_imports_another_test_module() -> None:
    found = []
    for path in files("tests"):
        for name in all_imports(path):
            if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_"):
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    assert found == []

"""service/errors.py: the domain's vocabulary stands alone, and each failure has one name."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from collections import defaultdict
from pathlib import Path

import service.errors

ROOT = Path(__file__).resolve().parents[3]
# Our top-level packages: every directory of the repository that is a Python package.
OURS = frozenset(path.parent.name for path in ROOT.glob("*/__init__.py"))
EXCEPTION_PACKAGES = ("service", "connect_routes", "token_store")


def imported_modules(path: Path) -> list[str]:
    """Every module `path` imports, anywhere in the file; a relative import counts as ours."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append("." * node.level + (node.module or ""))
    return found


def exception_classes(package: str) -> list[type[BaseException]]:
    """The exception classes defined (not re-exported) in every module of `package`."""
    root = importlib.import_module(package)
    modules = [root] + [
        importlib.import_module(info.name) for info in pkgutil.walk_packages(root.__path__, f"{package}.")
    ]
    return [
        cls
        for module in modules
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__ == module.__name__
    ]


def test_the_packages_of_ours_are_found() -> None:
    assert {"service", "connect_routes", "token_store", "mcp_url_connect"} <= OURS


def test_errors_imports_nothing_of_ours() -> None:
    ours = [
        name
        for name in imported_modules(ROOT / "service" / "errors.py")
        if name.startswith(".") or name.split(".")[0] in OURS
    ]
    assert ours == []


def test_no_two_exception_classes_share_a_name() -> None:
    places: defaultdict[str, list[str]] = defaultdict(list)
    for package in EXCEPTION_PACKAGES:
        for cls in exception_classes(package):
            places[cls.__name__].append(cls.__module__)
    assert {name: modules for name, modules in places.items() if len(modules) > 1} == {}


def test_every_error_says_what_failed_in_its_own_docstring() -> None:
    classes = [
        cls
        for _, cls in inspect.getmembers(service.errors, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__ == service.errors.__name__
    ]
    assert sorted(cls.__name__ for cls in classes) == sorted(service.errors.__all__)
    assert [cls.__name__ for cls in classes if not (cls.__dict__.get("__doc__") or "").strip()] == []

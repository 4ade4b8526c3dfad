"""The dependency direction docs/architecture.md states, as import-linter contracts in
pyproject.toml ([tool.importlinter]); `lint-imports` checks every import, inside functions too."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_import_keeps_the_contracts_in_pyproject() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(contracts)} kept, 0 broken." in result.stdout


# The contracts on service's own modules, checked again on a copy with an import planted.
SERVICE_CONTRACTS = (
    "service's folders import downwards only",
    "the flow core imports nothing of the MCP SDK",
)


def lint_service_copy(tree: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on `tree` (a copy of service/) with the contracts above, as pyproject.toml
    states them."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    chosen = [c for c in contracts if c["name"] in SERVICE_CONTRACTS]
    assert [c["name"] for c in chosen] == list(SERVICE_CONTRACTS)
    lines = ["[tool.importlinter]", 'root_packages = ["service"]', "include_external_packages = true"]
    for contract in chosen:
        lines += ["[[tool.importlinter.contracts]]"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in contract.items()]
    (tree / "contracts.toml").write_text("\n".join(lines) + "\n")
    lint_imports = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(lint_imports), "--no-cache", "contracts.toml"],
        cwd=tree,  # lint-imports puts its working directory first on sys.path: the copy is imported
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    ("module", "planted"),
    [
        ("flow/names.py", "service.mcp.errors"),  # a lower layer importing a higher one
        ("flow/names.py", "service.http.request_id"),  # independent siblings
        ("errors.py", "mcp_types"),  # the MCP SDK below service/mcp/
    ],
)
def test_an_import_against_the_contracts_is_found(tmp_path: Path, module: str, planted: str) -> None:
    """The contracts can fail: the same tree with one import planted breaks them."""
    shutil.copytree(ROOT / "service", tmp_path / "service", ignore=shutil.ignore_patterns("__pycache__"))
    assert lint_service_copy(tmp_path).returncode == 0  # the copy as it is keeps the contracts
    with (tmp_path / "service" / module).open("a") as source:
        source.write(f"import {planted}  # planted\n")
    result = lint_service_copy(tmp_path)
    importer = "service." + module.removesuffix(".py").replace("/", ".")
    assert result.returncode != 0
    assert f"{importer} -> {planted}" in result.stdout, result.stdout

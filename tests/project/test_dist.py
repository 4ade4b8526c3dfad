"""Installable before a release: the wheel `make dist` builds, installed with its `testing` and
`fastmcp` extras into a clean virtual environment, serves and tests a tool package that lives
outside this tree (examples/outside_tool_package: its own pyproject.toml, a GitHub tool that reads
three pages of repositories and one that opens an issue, its own kit tests on both revisions),
exactly as docs/testing.md ("Install") and docs/tools.md say."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "examples" / "outside_tool_package"
LOCK = ROOT / "requirements-dev.lock"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def run(*command: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, f"{command}:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout


def clean_environment() -> dict[str, str]:
    """This process's environment without what would let the clean venv see this checkout."""
    hidden = ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONHOME")
    return {k: v for k, v in os.environ.items() if k not in hidden}


def test_the_wheel_installs_and_runs_a_tool_package_from_outside_the_tree(tmp_path: Path) -> None:
    # The command `make dist` runs: the sdist, then the wheel built from it.
    makefile = (ROOT / "Makefile").read_text()
    assert "$(BIN)/python -m build --no-isolation --outdir dist ." in makefile
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", tmp_path / "dist", ".")
    [wheel] = (tmp_path / "dist").glob("mcp_url_connect-*-py3-none-any.whl")
    assert len(list((tmp_path / "dist").glob("mcp_url_connect-*.tar.gz"))) == 1
    names = zipfile.ZipFile(wheel).namelist()
    for data in (
        "connect_routes/templates/",
        "token_store/backends/redis/scripts/",
        "mock_providers/templates/",
    ):
        assert any(name.startswith(data) for name in names), f"the wheel lacks {data}"
    assert not any(name.startswith(("tests/", "examples/", "mcpuc_provider_tools/")) for name in names)

    # A clean environment, outside the checkout; dependencies at the versions the lock tested.
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    pins = re.findall(r"^([A-Za-z0-9_.-]+==[^ \\\n]+)", LOCK.read_text(), re.M)
    (tmp_path / "constraints.txt").write_text("\n".join(pins) + "\n")
    env = {**clean_environment(), "PIP_CONSTRAINT": str(tmp_path / "constraints.txt")}
    pip = [venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    run(*pip, f"{wheel}[testing,fastmcp]", cwd=tmp_path, env=env)
    package = shutil.copytree(PACKAGE, tmp_path / "acme-github-tools")
    run(*pip, package, cwd=tmp_path, env=env)

    # What docs/tools.md says: installed beside the server, the package is served.
    group = "mcp_url_connect.tools"
    probe = f"import importlib.metadata as m; print(sorted(e.name for e in m.entry_points(group={group!r})))"
    assert run(venv / "bin" / "python", "-c", probe, cwd=tmp_path, env=env).strip() == "['acme-github']"
    run(venv / "bin" / "mcp-url-connect", "--help", cwd=tmp_path, env=env)

    # Its own kit tests, on both revisions, as its developers run them.
    output = run(
        venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=package, env=env
    )
    assert re.search(r"\b5 passed\b", output), output[-2000:]

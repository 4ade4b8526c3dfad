"""service/ops/cli/preamble.py: every command fails the same way, one line on stderr and its exit
code; `python -m service.ops.cli` is the same command as the entry point."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.ops.cli import main

REPO_ROOT = Path(__file__).resolve().parents[5]


def configure(monkeypatch: pytest.MonkeyPatch, store_url: str) -> None:
    key = base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    environ = {
        "MCPUC_PUBLIC_URL": "https://mcp.example.com",
        "MCPUC_AUTH_ISSUER": "https://as.example.com",
        "MCPUC_LOGIN_CLIENT_ID": "login",
        "MCPUC_SESSION_SECRET": "s" * 40,
        "MCPUC_ENCRYPTION_KEYS": f"k1:{key}",
        "MCPUC_REQUEST_STATE_KEYS": key,
        "MCPUC_STORE_URL": store_url,
    }
    monkeypatch.delenv("MCPUC_CONFIG_FILE", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize(
    "argv", [["keys", "rotate"], ["keys", "retire", "old"], ["store", "migrate"], ["connections", "list"]]
)
def test_a_store_that_cannot_be_opened_is_one_line_and_exit_1(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("")  # a file where the store's folder would be
    configure(monkeypatch, f"sqlite:///{tmp_path / 'a-file' / 'store.sqlite3'}")
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("mcp-url-connect: sqlite store: cannot open database") and err.count("\n") == 1


@pytest.mark.parametrize("argv", [["keys", "rotate"], ["store", "migrate"], ["connections", "list"]])
def test_an_incomplete_configuration_is_one_line_and_exit_2(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("MCPUC_AUTH_ISSUER", "MCPUC_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("mcp-url-connect: configuration error: ") and err.count("\n") == 1
    assert "MCPUC_AUTH_ISSUER is required" in err


def test_the_module_runs_as_the_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "service.ops.cli", "connections", "revoke", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert result.returncode == 2
    assert result.stderr == "mcp-url-connect: give either --user SUB or --provider P --all\n"


def test_a_provider_not_configured_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    configure(monkeypatch, f"sqlite:///{tmp_path / 'store.sqlite3'}")
    assert main(["connections", "revoke", "--user", "alice", "--provider", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mcp-url-connect: ") and "nope" in err and err.count("\n") == 1

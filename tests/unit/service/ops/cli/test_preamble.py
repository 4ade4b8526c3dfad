"""service/ops/cli/preamble.py: every command fails the same way, one line on stderr and its exit
code; `python -m service.ops.cli` is the same command as the entry point."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from service.observability.logs import escape_control_characters
from service.ops.cli import main
from service.ops.cli.preamble import complain, say, say_json
from tests.support.cli import serve_environment

REPO_ROOT = Path(__file__).resolve().parents[5]


@pytest.mark.parametrize(
    "argv", [["keys", "rotate"], ["keys", "retire", "old"], ["store", "migrate"], ["connections", "list"]]
)
def test_a_store_that_cannot_be_opened_is_one_line_and_exit_1(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("")  # a file where the store's folder would be
    serve_environment(monkeypatch, store_url=f"sqlite:///{tmp_path / 'a-file' / 'store.sqlite3'}")
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
    serve_environment(monkeypatch, store_url=f"sqlite:///{tmp_path / 'store.sqlite3'}")
    assert main(["connections", "revoke", "--user", "alice", "--provider", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mcp-url-connect: ") and "nope" in err and err.count("\n") == 1


def test_every_line_printed_is_escaped_as_the_text_log_writes_it(capsys: pytest.CaptureFixture[str]) -> None:
    hostile = "label\x1b]52;c;cHduZWQ=\x07\x9b2J\x7f\r\nforged row"
    say(f"deleted alice mockhub 1 ({hostile})", "done")
    say_json({"account_label": hostile})
    complain(f"unknown provider {hostile}")
    out, err = capsys.readouterr()
    assert out.splitlines()[:2] == [f"deleted alice mockhub 1 ({escape_control_characters(hostile)})", "done"]
    assert json.loads("\n".join(out.splitlines()[2:])) == {"account_label": hostile}  # still JSON, exact
    assert err == f"mcp-url-connect: unknown provider {escape_control_characters(hostile)}\n"
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]", out + err)

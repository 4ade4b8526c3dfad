"""The console entry point: dev-token and serve refuse clearly; demo data is generated once and kept."""

from __future__ import annotations

import stat
from pathlib import Path

import jwt
import pytest

from mock_providers import create_mock_providers_app
from service.cli import main
from service.demo import build_demo


def test_dev_token_refuses_without_dev_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dev-token", "alice", "--data-dir", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "dev-as.json" in captured.err


def test_dev_token_prints_only_a_token_for_the_demo_audience(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo = build_demo("127.0.0.1", 9100, 9101, tmp_path)
    create_mock_providers_app(demo.providers)  # creates the dev AS key under the data dir
    assert main(["dev-token", "alice", "--data-dir", str(tmp_path)]) == 0
    token = capsys.readouterr().out.strip()
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["sub"] == "alice"
    assert claims["iss"] == demo.settings.auth_issuer
    assert claims["aud"] == demo.settings.resource_url


def test_demo_secrets_are_generated_once_and_private(tmp_path: Path) -> None:
    first = build_demo("127.0.0.1", 9100, 9101, tmp_path)
    second = build_demo("127.0.0.1", 9100, 9101, tmp_path)
    assert first.settings.encryption_keys == second.settings.encryption_keys
    mode = stat.S_IMODE((tmp_path / "demo-secrets.json").stat().st_mode)
    assert mode == 0o600


def test_serve_refuses_an_incomplete_configuration(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("MCPUC_AUTH_ISSUER", "MCPUC_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    assert main(["serve"]) == 2
    assert "MCPUC_AUTH_ISSUER is required" in capsys.readouterr().err

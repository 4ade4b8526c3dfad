"""The environment of a complete `serve` configuration, for running a CLI command in a test."""

from __future__ import annotations

import base64
import os

import pytest


def new_key() -> str:
    """A fresh 32-byte key, base64url without padding (an encryption or requestState key)."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")


def serve_environment(
    monkeypatch: pytest.MonkeyPatch, *, store_url: str | None = None, encryption_keys: str | None = None
) -> None:
    """Set the MCPUC_* variables `serve` needs (no configuration file); `store_url` and
    `encryption_keys` as given (the data dir's SQLite store and one fresh key otherwise)."""
    environ = {
        "MCPUC_PUBLIC_URL": "https://mcp.example.com",
        "MCPUC_AUTH_ISSUER": "https://as.example.com",
        "MCPUC_LOGIN_CLIENT_ID": "login",
        "MCPUC_SESSION_SECRET": "s" * 40,
        "MCPUC_ENCRYPTION_KEYS": encryption_keys or f"k1:{new_key()}",
        "MCPUC_REQUEST_STATE_KEYS": new_key(),
    }
    if store_url is not None:
        environ["MCPUC_STORE_URL"] = store_url
    monkeypatch.delenv("MCPUC_CONFIG_FILE", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)

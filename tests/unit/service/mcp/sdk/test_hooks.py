"""service/mcp/sdk/hooks.py: every private part of the SDK we rely on is present in the installed SDK,
and a server refuses to start, naming the part, when one is missing."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from mock_providers.demo import build_demo
from mock_providers.testing.servers import free_port
from service.app import create_app
from service.mcp.sdk.hooks import HOOKS, SdkHookMissing, check_sdk_hooks
from service.ops.cli import main


def test_every_hook_is_present_in_the_installed_sdk() -> None:
    assert [hook.name for hook in HOOKS if not hook.present()] == []
    check_sdk_hooks()


def test_a_missing_hook_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(StreamableHTTPSessionManager, "_admit_session")
    with pytest.raises(SdkHookMissing, match=r"StreamableHTTPSessionManager\._admit_session"):
        check_sdk_hooks()


def test_an_attribute_the_sdk_no_longer_sets_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def init_without_owners(self: StreamableHTTPSessionManager, *args: object, **kwargs: object) -> None:
        self._server_instances = {}

    monkeypatch.setattr(StreamableHTTPSessionManager, "__init__", init_without_owners)
    with pytest.raises(SdkHookMissing) as raised:
        check_sdk_hooks()
    assert "StreamableHTTPSessionManager._session_owners" in str(raised.value)
    assert "_server_instances" not in str(raised.value)


def test_no_server_is_built_on_an_sdk_without_a_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = build_demo("127.0.0.1", 9100, 9101, tmp_path).settings
    monkeypatch.delattr(StreamableHTTPSessionManager, "_admit_session")
    with pytest.raises(SdkHookMissing):
        create_app(settings)


def test_serve_on_an_sdk_without_a_hook_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delattr(StreamableHTTPSessionManager, "_admit_session")
    ports = [str(free_port()) for _ in range(3)]
    argv = ["demo", "--data-dir", str(tmp_path), "--port", ports[0], "--providers-port", ports[1]]
    assert main([*argv, "--metrics-port", ports[2]]) == 2
    err = capsys.readouterr().err
    assert "configuration error" in err and "_admit_session" in err and "Traceback" not in err

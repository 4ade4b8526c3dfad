"""service/mcp/sdk/hooks.py: every private part of the SDK we rely on has, in the installed SDK, the
effect we rely on; a server refuses to start, naming the part, when one is missing or changed."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http import EventStore, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from mock_providers.demo import build_demo
from mock_providers.testing.servers import free_port
from service.app import create_app
from service.mcp.sdk.hooks import HOOKS, SdkHookMissing, adopt_session_manager, check_sdk_hooks
from service.mcp.sdk.sse_resumption import SessionEventStore
from service.ops.cli import main


def test_every_hook_works_in_the_installed_sdk() -> None:
    assert [hook.name for hook in HOOKS if not hook.works()] == []
    check_sdk_hooks()


def test_a_missing_hook_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(StreamableHTTPSessionManager, "_admit_session")
    with pytest.raises(SdkHookMissing, match=r"StreamableHTTPSessionManager\._admit_session"):
        check_sdk_hooks()


def test_a_hook_that_no_longer_has_its_effect_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Present but changed: an admission that no longer records the session's owner."""
    admit = StreamableHTTPSessionManager._admit_session

    def admit_without_owner(
        self: StreamableHTTPSessionManager, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        return admit(self, None)

    monkeypatch.setattr(StreamableHTTPSessionManager, "_admit_session", admit_without_owner)
    with pytest.raises(SdkHookMissing) as raised:
        check_sdk_hooks()
    assert "StreamableHTTPSessionManager._session_owners" in str(raised.value)
    assert "_server_instances" not in str(raised.value) and "\n" not in str(raised.value)


def test_an_admission_that_stops_reading_the_event_store_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    admit = StreamableHTTPSessionManager._admit_session

    def admit_without_store(
        self: StreamableHTTPSessionManager, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        self.event_store = None
        return admit(self, requestor)

    monkeypatch.setattr(StreamableHTTPSessionManager, "_admit_session", admit_without_store)
    with pytest.raises(SdkHookMissing, match=r"^[^\n]*event_store, read once per admitted session"):
        check_sdk_hooks()


def test_the_probes_log_no_session(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        check_sdk_hooks()
    assert not [r for r in caplog.records if "transport" in r.getMessage()]


def test_the_adopted_manager_admits_through_our_checks_and_gives_each_session_a_store() -> None:
    server: MCPServer[Any] = MCPServer("t")
    server.streamable_http_app()
    sessions = adopt_session_manager(server)
    seen: list[AuthorizationContext | None] = []
    stores: list[EventStore] = []
    sessions.add_admission_check(seen.append)

    def new_store() -> EventStore:
        stores.append(SessionEventStore())
        return stores[-1]

    sessions.give_each_session_a_store(new_store)
    owner = AuthorizationContext(client_id="c", issuer="https://as.example", subject="alice")
    first = server.session_manager._admit_session(owner)
    second = server.session_manager._admit_session(owner)
    assert first is not None and second is not None
    assert seen == [owner, owner] and len(stores) == 2
    assert [first._event_store, second._event_store] == stores  # one store per session
    assert server.session_manager.event_store is None
    assert (
        set(sessions.session_owners)
        == set(sessions.live_transports)
        == {
            first.mcp_session_id,
            second.mcp_session_id,
        }
    )


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

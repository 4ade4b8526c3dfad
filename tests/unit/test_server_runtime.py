"""The servers' event loop (service/server_runtime.py, setting `event_loop`): uvloop by default,
asyncio's own on request, and a clear configuration error for uvloop where it is not installed
(tests/unit/test_settings.py)."""

from __future__ import annotations

import asyncio

import pytest
import uvloop
from starlette.applications import Starlette

from service import server_runtime
from service.cli import build_server
from service.server_runtime import EventLoopChoice, event_loop_name, loop_factory
from service.settings import load_settings


def test_auto_takes_uvloop_when_installed() -> None:
    assert event_loop_name("auto") == "uvloop"
    assert loop_factory("auto") is uvloop.new_event_loop
    assert load_settings({}).event_loop == "auto"


def test_the_http_parser_is_h11_whatever_is_installed() -> None:
    # httptools accepts header fields of any size and keeps trailing whitespace in field values.
    assert build_server(Starlette(), "127.0.0.1", 0).config.http == "h11"


def test_asyncio_on_request() -> None:
    assert loop_factory("asyncio") is None  # asyncio.Runner's own loop
    assert load_settings({"MCPUC_EVENT_LOOP": "asyncio"}).event_loop == "asyncio"


def test_without_uvloop_auto_falls_back_to_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_runtime, "_installed", lambda module: False)
    assert event_loop_name("auto") == "asyncio" and loop_factory("auto") is None


@pytest.mark.parametrize(
    ("choice", "expected"), [("uvloop", uvloop.Loop), ("asyncio", asyncio.BaseEventLoop)]
)
def test_the_chosen_loop_runs_the_servers(choice: EventLoopChoice, expected: type) -> None:
    async def running_loop() -> type[asyncio.AbstractEventLoop]:
        return type(asyncio.get_running_loop())

    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        assert issubclass(runner.run(running_loop()), expected)

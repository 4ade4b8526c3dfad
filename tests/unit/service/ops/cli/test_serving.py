"""service/ops/cli/serving.py: the servers of one command stop together."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from service.ops.cli.serving import build_server, serve_until_stopped


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port another process could hold: bound and listening for the test's duration."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_server_failing_to_start_stops_the_others(held_port: int) -> None:
    from starlette.applications import Starlette

    healthy = build_server(Starlette(), "127.0.0.1", 0)
    failing = build_server(Starlette(), "127.0.0.1", held_port)
    code = asyncio.run(asyncio.wait_for(serve_until_stopped({"ok": healthy, "bad": failing}), 10))
    assert code == 1
    assert healthy.should_exit

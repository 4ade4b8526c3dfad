"""service/ops/cli/serving.py: the servers of one command stop together."""

from __future__ import annotations

import asyncio

from service.ops.cli.serving import build_server, serve_until_stopped


def test_a_server_failing_to_start_stops_the_others(held_port: int) -> None:
    from starlette.applications import Starlette

    healthy = build_server(Starlette(), "127.0.0.1", 0)
    failing = build_server(Starlette(), "127.0.0.1", held_port)
    code = asyncio.run(asyncio.wait_for(serve_until_stopped({"ok": healthy, "bad": failing}), 10))
    assert code == 1
    assert healthy.should_exit

"""`mcp-url-connect serve` with one test-only tool, `sleep`, that answers after `seconds`: a call
that is surely in flight when the test stops the replica (tests/e2e/test_drain.py)."""

from __future__ import annotations

import sys
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette

import service.app
from service.ops.cli import main
from service.settings import Settings

MAX_SECONDS = 10.0


def create_app_with_sleep(settings: Settings, runtime: Any = None) -> Starlette:
    app = create_app(settings, runtime)
    server: MCPServer[Any] = app.state.mcp_server

    @server.tool(description="Test only: answers after `seconds` (at most 10).")
    async def sleep(seconds: float) -> str:
        await anyio.sleep(min(seconds, MAX_SECONDS))
        return "slept"

    return app


create_app = service.app.create_app

if __name__ == "__main__":
    service.app.create_app = create_app_with_sleep  # type: ignore[assignment]  # `serve` imports it late
    sys.exit(main(["serve"]))

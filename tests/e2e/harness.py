"""Run the demo (MCP server + dev AS + mockhub) under uvicorn on free ports, in a thread."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from mock_providers import create_mock_providers_app
from service.app import create_app
from service.demo import Demo, build_demo

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@dataclass
class DemoServers:
    """Both listeners of the demo, started in a background thread with their own event loop."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    providers_port: int = field(default_factory=free_port)
    overrides: dict[str, Any] = field(default_factory=dict)
    demo: Demo = field(init=False)
    apps: dict[str, Any] = field(init=False, default_factory=dict)
    _servers: list[uvicorn.Server] = field(init=False, default_factory=list)
    _thread: threading.Thread | None = field(init=False, default=None)

    def start(self) -> DemoServers:
        self.demo = build_demo(HOST, self.port, self.providers_port, self.data_dir, **self.overrides)
        self.apps = {
            "providers": create_mock_providers_app(self.demo.providers),
            "mcp": create_app(self.demo.settings),
        }
        self._servers = [
            uvicorn.Server(
                uvicorn.Config(self.apps["providers"], host=HOST, port=self.providers_port, log_config=None)
            ),
            uvicorn.Server(uvicorn.Config(self.apps["mcp"], host=HOST, port=self.port, log_config=None)),
        ]

        async def serve() -> None:
            await asyncio.gather(*(s.serve() for s in self._servers))

        self._thread = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 15
        while not all(s.started for s in self._servers):
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("demo servers did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)

    @property
    def mcp_url(self) -> str:
        return self.demo.settings.resource_url

    @property
    def public_url(self) -> str:
        return self.demo.settings.public_url

    @property
    def mockhub(self) -> Any:
        return self.apps["providers"].state.mockhub

    @property
    def store_file(self) -> Path:
        return self.data_dir.resolve() / "store.sqlite3"
